// Command mixed hashes with crypto/sha256 on one goroutine and calls
// getppid(2) on another, while profiling itself with Go's own CPU profiler
// for the given duration; it writes that profile to the given file and
// exits. A patient for comparing gosleuth's stacks with Go's.
package main

import (
	"crypto/sha256"
	"os"
	"runtime/pprof"
	"sync/atomic"
	"syscall"
	"time"
)

var sink atomic.Uint64

//go:noinline
func hashLoop(stop *atomic.Bool) {
	buf := make([]byte, 8<<10)
	for !stop.Load() {
		s := sha256.Sum256(buf)
		buf[0] ^= s[0]
		sink.Add(uint64(s[1]))
	}
}

//go:noinline
func syscallLoop(stop *atomic.Bool) {
	for !stop.Load() {
		sink.Add(uint64(syscall.Getppid()))
	}
}

func main() {
	d, err := time.ParseDuration(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	f, err := os.Create(os.Args[2])
	if err != nil {
		os.Exit(1)
	}
	// Wait for the profiler outside to attach: it touches the ready file.
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(os.Args[2] + ".go"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		os.Exit(1)
	}
	var stop atomic.Bool
	go hashLoop(&stop)
	go syscallLoop(&stop)
	time.Sleep(d)
	stop.Store(true)
	pprof.StopCPUProfile()
	f.Close()
}
