// Command patient is the probe engine's test patient: it calls known
// functions a known number of times.
package main

import (
	"bufio"
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// hit has a frame (it calls leaf), so its probe sits on the emulated
// PUSHQ BP after the stack check.
//
//go:noinline
func hit(x int) int { return leaf(x) + 1 }

//go:noinline
func leaf(x int) int { return x * 2 }

var sink int

// worker calls hit n times.
//
//go:noinline
func worker(n int) {
	for i := range n {
		sink += hit(i)
	}
}

// poll sleeps 1 ms in a loop, as a clock loop does.
//
//go:noinline
func poll() {
	for {
		time.Sleep(time.Millisecond)
	}
}

var mu sync.Mutex

// critical holds mu for about 100 µs: eight of them contend, a few
// thousand times a second.
//
//go:noinline
func critical() {
	mu.Lock()
	time.Sleep(100 * time.Microsecond)
	mu.Unlock()
}

var slowMu sync.Mutex

// rounds is the SHA-256 rounds contend makes under the lock.
var rounds = 256

// slowLocks counts contend's Lock calls, each of which takes the slow
// path (see contend).
var slowLocks atomic.Uint64

// contend takes slowMu, hashes a little under it, and lets it go only once
// another goroutine waits for it (a waiter counted in the mutex's state,
// or a spinner's woken bit), so the mutex's state is never zero again
// after the first contention: every later Lock fails its fast path and
// calls lockSlow, once. The patient's own count of Lock calls is then the
// true count of slow-path calls (up to the goroutines' first Locks).
//
//go:noinline
func contend(buf []byte) {
	slowLocks.Add(1)
	slowMu.Lock() // the slow Lock
	for range rounds {
		sum := sha256.Sum256(buf)
		buf = sum[:]
	}
	state := (*atomic.Int32)(unsafe.Pointer(&slowMu)) // sync.Mutex's first word is its state
	for i := 0; state.Load() == 1; i++ {              // 1: locked, nobody waiting
		if i > 100 {
			runtime.Gosched()
		}
	}
	slowMu.Unlock()
}

// spawnLeaky starts goroutines that never end.
//
//go:noinline
func spawnLeaky(block chan struct{}) {
	go func() { <-block }()
}

func main() {
	mode := flag.String("mode", "count", "count, sleep or hot")
	n := flag.Int("n", 50000, "calls per worker (count)")
	flag.IntVar(&rounds, "rounds", rounds, "SHA-256 rounds under the lock (slowlock)")
	flag.Parse()
	fmt.Println("ready")
	switch *mode {
	case "count":
		// Wait for the probe, then four workers: two on threads locked
		// from the start, two on threads made after the probe attached.
		bufio.NewReader(os.Stdin).ReadString('\n')
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i >= 2 {
					runtime.LockOSThread() // exits with the goroutine: a fresh thread
				}
				worker(*n)
			}()
		}
		wg.Wait()
		fmt.Println("done", 4**n)
		for {
			time.Sleep(time.Hour) // not select{}: with every goroutine blocked the runtime would exit
		}
	case "sleep":
		poll()
	case "lock":
		for range 8 {
			go func() {
				for {
					critical()
				}
			}()
		}
		select {}
	case "slowlock":
		// Four goroutines take the slow path of one mutex at every Lock;
		// a line on stdin is answered with the Lock calls so far and the
		// process's CPU time (ns, all threads).
		for range 4 {
			go func() {
				buf := make([]byte, 32)
				for {
					contend(buf)
				}
			}()
		}
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			var ru syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			fmt.Println("calls", slowLocks.Load(), "cpu", ru.Utime.Nano()+ru.Stime.Nano())
		}
	case "spawn":
		block := make(chan struct{})
		for {
			spawnLeaky(block)
			time.Sleep(5 * time.Millisecond)
		}
	case "churn":
		// Threads and goroutines come and go; "ping" on stdin is answered
		// with the rounds done.
		rounds := 0
		var rmu sync.Mutex
		go func() {
			for {
				var wg sync.WaitGroup
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						runtime.LockOSThread() // a new thread each time
						worker(1000)
						time.Sleep(time.Millisecond)
					}()
				}
				wg.Wait()
				rmu.Lock()
				rounds++
				rmu.Unlock()
			}
		}()
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			rmu.Lock()
			fmt.Println("rounds", rounds)
			rmu.Unlock()
		}
	case "hot":
		for {
			worker(1 << 20)
		}
	}
}
