// Command threads keeps two goroutines busy and, every 150 ms, parks one
// more goroutine in a blocking nanosleep(2) so the runtime starts a new
// thread for the Ps it leaves: a patient whose threads appear while it is
// being sampled.
package main

import (
	"syscall"
	"time"
)

var sink int

func spin() {
	for i := 0; ; i++ {
		sink += i
	}
}

func main() {
	go spin()
	go spin()
	for i := 0; i < 40; i++ {
		time.Sleep(150 * time.Millisecond)
		go func() {
			ts := syscall.NsecToTimespec(int64(time.Hour))
			syscall.Nanosleep(&ts, nil)
		}()
	}
	select {}
}
