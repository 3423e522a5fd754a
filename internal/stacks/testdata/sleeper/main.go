// Command sleeper blocks in nanosleep(2) for a millisecond at a time in a
// loop, and burns a little CPU in between: a patient for off-CPU sampling.
package main

import (
	"syscall"
	"time"
)

var sink int

//go:noinline
func nap() {
	ts := syscall.NsecToTimespec(int64(time.Millisecond))
	syscall.Nanosleep(&ts, nil)
}

func main() {
	for {
		nap()
		for i := 0; i < 1000; i++ {
			sink += i
		}
	}
}
