//go:build linux

package main

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// pingProbe measures what a wake-up costs the kernel here, over time: two
// threads of this process bounce a byte over two pipes with blocking
// system calls, 20 round trips every 50 ms, and each batch records the CPU
// time the first thread spent per round trip (two system calls and a
// wake-up). Under a hypervisor that cost moves with the host (interrupts
// and timers exit to it), and a server's CPU moves with it.
type pingProbe struct {
	mu   sync.Mutex
	at   []time.Time
	cost []float64
	stop chan struct{}
}

func startPing() *pingProbe {
	p := &pingProbe{stop: make(chan struct{})}
	var a, b [2]int
	if unix.Pipe2(a[:], unix.O_CLOEXEC) != nil || unix.Pipe2(b[:], unix.O_CLOEXEC) != nil {
		return nil
	}
	go func() {
		runtime.LockOSThread()
		buf := make([]byte, 1)
		for {
			if n, err := unix.Read(a[0], buf); n != 1 || err != nil {
				return
			}
			unix.Write(b[1], buf)
		}
	}()
	go func() {
		runtime.LockOSThread()
		defer unix.Close(a[1]) // ends the partner
		buf := make([]byte, 1)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			t0 := threadCPU()
			for range 20 {
				unix.Write(a[1], buf)
				unix.Read(b[0], buf)
			}
			d := threadCPU() - t0
			p.mu.Lock()
			p.at = append(p.at, time.Now())
			p.cost = append(p.cost, float64(d)/20)
			p.mu.Unlock()
		}
	}()
	return p
}

func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// mean is the probe's mean cost per round trip, in nanoseconds, over the
// batches taken from t0 to t1; 0 when there were none or there is no probe.
func (p *pingProbe) mean(t0, t1 time.Time) float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	n := 0
	for i, t := range p.at {
		if !t.Before(t0) && !t.After(t1) {
			sum += p.cost[i]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// close stops the probe; nil: nothing.
func (p *pingProbe) close() {
	if p != nil {
		close(p.stop)
	}
}
