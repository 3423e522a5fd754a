// Command target is the workload of bench/profile-overhead: for -d it runs
// -workers busy goroutines doing -work (hash: crypto/sha256 over 8 KiB;
// syscall: getppid(2) in a loop; mixed: both; switch: a pair of goroutines
// passing a byte back and forth over two pipes, each pass a context
// switch), then prints the operations
// done, its own CPU time and the wall time, as "ops=N cpu=S wall=S".
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	work := flag.String("work", "mixed", "hash, syscall, mixed or switch")
	d := flag.Duration("d", 5*time.Second, "how long to run")
	workers := flag.Int("workers", 1, "busy goroutines (0: one per CPU)")
	flag.Parse()
	var ops atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	n := *workers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	start := time.Now()
	if *work == "switch" {
		n = 0
		wg.Add(1)
		go pingPong(&stop, &ops, &wg)
	}
	for i := 0; i < n; i++ {
		w := *work
		if w == "mixed" {
			w = []string{"hash", "syscall"}[i%2]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8<<10)
			var local int64
			for !stop.Load() {
				if w == "hash" {
					s := sha256.Sum256(buf)
					buf[0] ^= s[0]
				} else {
					syscall.Getppid()
				}
				local++
				if local&255 == 0 {
					ops.Add(256)
				}
			}
		}()
	}
	time.Sleep(*d)
	stop.Store(true)
	wg.Wait()
	wall := time.Since(start)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if *work != "hash" && *work != "syscall" && *work != "mixed" && *work != "switch" {
		fmt.Fprintln(os.Stderr, "target: -work must be hash, syscall, mixed or switch")
		os.Exit(2)
	}
	fmt.Printf("ops=%d cpu=%.3f wall=%.3f\n", ops.Load(), cpu.Seconds(), wall.Seconds())
}

// pingPong passes a byte between two threads over two pipes until stop:
// each pass blocks one thread in read(2) and wakes the other.
func pingPong(stop *atomic.Bool, ops *atomic.Int64, wg *sync.WaitGroup) {
	defer wg.Done()
	var a, b [2]int
	if err := syscall.Pipe(a[:]); err != nil {
		fmt.Fprintln(os.Stderr, "target: pipe:", err)
		os.Exit(1)
	}
	if err := syscall.Pipe(b[:]); err != nil {
		fmt.Fprintln(os.Stderr, "target: pipe:", err)
		os.Exit(1)
	}
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 1)
		for {
			if n, _ := syscall.Read(a[0], buf); n != 1 {
				return
			}
			syscall.Write(b[1], buf)
		}
	}()
	runtime.LockOSThread()
	buf := make([]byte, 1)
	for !stop.Load() {
		syscall.Write(a[1], buf)
		syscall.Read(b[0], buf)
		ops.Add(1)
	}
	syscall.Close(a[1])
}
