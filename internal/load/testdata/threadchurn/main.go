// Command threadchurn is a watch test patient whose wake-ups happen on
// threads that exit: each worker locks its goroutine to an OS thread,
// sleeps 1 ms twenty times (twenty wake-ups of that thread) and returns
// still locked, which ends the thread. It prints "ready" and runs until
// killed.
package main

import (
	"fmt"
	"runtime"
	"time"
)

func main() {
	fmt.Println("ready")
	for {
		done := make(chan struct{})
		for range 4 {
			go func() {
				runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
				for range 20 {
					time.Sleep(time.Millisecond)
				}
				done <- struct{}{}
			}()
		}
		for range 4 {
			<-done
		}
	}
}
