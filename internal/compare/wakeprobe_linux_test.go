package compare

import (
	"runtime"
	"testing"
	"time"
)

// TestWakeProbe runs the wake-up probe for a second against the real
// kernel: it takes its batches (one every 50 ms), a round trip costs
// between 0.2 and 200 us of CPU, an interval with too few batches gives
// 0, and close ends both of its threads.
func TestWakeProbe(t *testing.T) {
	before := runtime.NumGoroutine()
	p := startWakeProbe()
	if p == nil {
		t.Fatal("the probe's pipes could not be made")
	}
	t0 := time.Now()
	time.Sleep(time.Second)
	t1 := time.Now()
	ns := p.mean(t0, t1)
	p.mu.Lock()
	batches := len(p.at)
	p.mu.Unlock()
	p.close()
	if batches < 15 || batches > 21 {
		t.Errorf("%d batches in a second, want about 20", batches)
	}
	if ns < 200 || ns > 200e3 {
		t.Errorf("a round trip cost %.0f ns of CPU, want 0.2-200 us", ns)
	}
	if got := p.mean(t1.Add(-100*time.Millisecond), t1); got != 0 {
		t.Errorf("mean over two batches = %.0f, want 0 (too few)", got)
	}
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after close, %d before", n, before)
	}
	t.Logf("%d batches, %.0f ns of CPU a round trip", batches, ns)
}
