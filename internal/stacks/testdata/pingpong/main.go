// Command pingpong hands a token back and forth between two goroutines
// locked to their own threads, so every hand-over is an OS context switch:
// tens of thousands a second for little CPU. A patient for the cost of
// per-thread sampling events.
package main

import "runtime"

func main() {
	ping, pong := make(chan int), make(chan int)
	go func() {
		runtime.LockOSThread()
		for v := range ping {
			pong <- v + 1
		}
	}()
	runtime.LockOSThread()
	for v := 0; ; {
		ping <- v
		v = <-pong
	}
}
