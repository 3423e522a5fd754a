package window

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
)

func TestRuntimeBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	all := goruntime.KnownGoroutines | goruntime.KnownGoroutinesCreated | goruntime.KnownGCCycles |
		goruntime.KnownCPUClasses | goruntime.KnownMutexWait | goruntime.KnownGODEBUG
	a := &goruntime.Sample{Time: t0, Known: all, Goroutines: 10, GoroutinesCreated: 100, GCCycles: 5, MutexWait: 1,
		CPU:     goruntime.CPUClasses{Total: 10, Idle: 4, GCTotal: 1, GCAssist: 0.2},
		GODEBUG: map[string]uint64{"randseednop": 3, "x509sha1": 0}}
	b := &goruntime.Sample{Time: t0.Add(2 * time.Second), Known: all, Goroutines: 15, GoroutinesCreated: 120, GCCycles: 6,
		MutexWait: 2, CPU: goruntime.CPUClasses{Total: 14, Idle: 6, GCTotal: 1.5, GCAssist: 0.4},
		GODEBUG: map[string]uint64{"randseednop": 7, "x509sha1": 0}}
	w := RuntimeBetween(a, b)
	if w.GoroutinesDelta != 5 || w.CreatedPerSec != 10 || w.GCCyclesPerSec != 0.5 || w.MutexWaitPerSec != 0.5 {
		t.Errorf("window %+v", w)
	}
	if !math.IsNaN(w.GCCPUShare) || len(w.Notes) == 0 || !strings.Contains(w.Notes[0], "at least 2 GC cycles") {
		t.Errorf("one cycle: share %g notes %q", w.GCCPUShare, w.Notes)
	}
	if w.GODEBUG["randseednop"] != 4 || w.GODEBUGTotal["randseednop"] != 7 || len(w.GODEBUGTotal) != 1 {
		t.Errorf("godebug %v %v", w.GODEBUG, w.GODEBUGTotal)
	}
	b.GCCycles = 7
	w = RuntimeBetween(a, b)
	if w.GCCPUShare != 0.25 || math.Abs(w.AssistShare-0.1) > 1e-12 || w.GCCPUCores != 0.25 {
		t.Errorf("two cycles: share %g assist %g cores %g", w.GCCPUShare, w.AssistShare, w.GCCPUCores)
	}
	// Unknown figures stay unknown.
	b.Known &^= goruntime.KnownMutexWait
	if w := RuntimeBetween(a, b); w.Known.Has(goruntime.KnownMutexWait) {
		t.Error("mutex wait known in one sample only counted as known")
	}
	// MemStats pauses: only those of cycles ending in the window.
	a2 := &goruntime.Sample{Time: t0, Known: goruntime.KnownGCCycles, GCCycles: 2}
	b2 := &goruntime.Sample{Time: t0.Add(time.Second), Known: goruntime.KnownGCCycles, GCCycles: 4,
		Pauses: []goruntime.Pause{{GC: 4, Sec: 0.004}, {GC: 3, Sec: 0.003}, {GC: 2, Sec: 0.100}, {GC: 1, Sec: 0.200}}}
	w = RuntimeBetween(a2, b2)
	if !w.Known.Has(goruntime.KnownGCPauses) || w.PauseMax != 0.004 || w.PauseP50 != 0.003 {
		t.Errorf("memstats pauses: known %v p50 %g max %g", w.Known.Has(goruntime.KnownGCPauses), w.PauseP50, w.PauseMax)
	}
}

// TestHistogramBetween: the values a runtime histogram recorded between two
// readings, bucket by bucket; a bucket that went back counts nothing.
func TestHistogramBetween(t *testing.T) {
	h := &goruntime.Histogram{Buckets: []float64{math.Inf(-1), 0, 1, 2, 4, math.Inf(1)}, Counts: []uint64{0, 10, 80, 9, 1}}
	prev := &goruntime.Histogram{Buckets: h.Buckets, Counts: []uint64{0, 10, 0, 0, 0}}
	d := HistogramBetween(prev, h)
	if d.Total() != 90 || d.Quantile(0.5) != 2 || d.Quantile(0.99) != 4 || d.Quantile(1) != 4 || d.Max() != 4 {
		t.Errorf("delta %v: total %d p50 %g p99 %g max %g", d.Counts, d.Total(), d.Quantile(0.5), d.Quantile(0.99), d.Max())
	}
	if back := HistogramBetween(h, prev); back.Counts[2] != 0 {
		t.Errorf("backwards delta %v", back.Counts)
	}
	if d := HistogramBetween(nil, h); d.Total() != 100 {
		t.Errorf("no earlier reading: %v, want a copy of the later", d.Counts)
	}
}
