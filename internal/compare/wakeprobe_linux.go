package compare

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// wakeProbe measures, over the run, what a wake-up costs the kernel here:
// two threads of compare's process bounce a byte over two pipes with
// blocking system calls, 20 round trips every 50 ms (about 0.3% of a core),
// and each batch records the CPU time the first thread spent per round
// trip (two system calls and a wake-up), by its thread CPU clock.
//
// Why: on a virtual machine that cost moves over tens of seconds for every
// process at once (interrupts, timers and wake-ups exit to the
// hypervisor), and a server's CPU moves with it. The 3% pair of
// bench/compare-stats followed the probe with a correlation of 0.76-0.94
// from window to window, while a reference compute loop stayed within
// 0.3-0.9%: the noise that hid a 3% CPU change was this shared cost, not
// the programs. Analyze takes the probe's share out of the CPU pairs.
type wakeProbe struct {
	mu   sync.Mutex
	at   []time.Time
	cost []float64 // nanoseconds of CPU per round trip
	stop chan struct{}
	done chan struct{}
}

// startWakeProbe starts the probe; nil where the pipes cannot be made.
func startWakeProbe() *wakeProbe {
	var a, b [2]int
	if err := unix.Pipe2(a[:], unix.O_CLOEXEC); err != nil {
		return nil
	}
	if err := unix.Pipe2(b[:], unix.O_CLOEXEC); err != nil {
		unix.Close(a[0])
		unix.Close(a[1])
		return nil
	}
	p := &wakeProbe{stop: make(chan struct{}), done: make(chan struct{})}
	partner := make(chan struct{})
	go func() {
		defer close(partner)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := make([]byte, 1)
		for {
			if n, err := unix.Read(a[0], buf); n != 1 || err != nil && err != unix.EINTR {
				return // the write end closed: the probe stopped
			}
			unix.Write(b[1], buf)
		}
	}()
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		buf := make([]byte, 1)
		for {
			select {
			case <-p.stop:
				unix.Close(a[1])
				<-partner
				for _, fd := range []int{a[0], b[0], b[1]} {
					unix.Close(fd)
				}
				return
			case <-tick.C:
			}
			t0, ok := threadCPU()
			ok0 := ok
			for range 20 {
				if _, err := unix.Write(a[1], buf); err != nil {
					ok = false
				}
				if n, err := unix.Read(b[0], buf); n != 1 || err != nil {
					ok = false
				}
			}
			t1, ok1 := threadCPU()
			if !ok || !ok0 || !ok1 || t1 <= t0 {
				continue
			}
			p.mu.Lock()
			p.at = append(p.at, time.Now())
			p.cost = append(p.cost, float64(t1-t0)/20)
			p.mu.Unlock()
		}
	}()
	return p
}

func threadCPU() (int64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}

// mean is the probe's mean cost per round trip, in nanoseconds, over the
// batches taken from t0 to t1; 0 with fewer than 10 batches.
func (p *wakeProbe) mean(t0, t1 time.Time) float64 {
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
	if n < 10 {
		return 0
	}
	return sum / float64(n)
}

// close stops the probe and closes its pipes.
func (p *wakeProbe) close() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
}
