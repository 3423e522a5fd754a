// Command burner is the test patient of window.Collect's quiet CPU: a Go
// program whose only activity is a 1 ms ticker (a few percent of a core),
// which also spins half of every millisecond from SIGUSR1 to SIGUSR2, as a
// target pays for instruments attached to it. It prints "ready" and runs
// until killed.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	var burn atomic.Bool
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sig {
			burn.Store(s == syscall.SIGUSR1)
		}
	}()
	t := time.NewTicker(time.Millisecond)
	fmt.Println("ready")
	for range t.C {
		if burn.Load() {
			for end := time.Now().Add(500 * time.Microsecond); time.Now().Before(end); {
			}
		}
	}
}
