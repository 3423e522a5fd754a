package window

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// RuntimeBetween is what two samples of one Go program's runtime, a taken
// before b, tell about the time between them: gauges (goroutines, heap,
// threads) are b's values, rates and distributions are of the deltas.
// Known is the intersection of the samples' bits, plus the gauges b knows.
// It is a pure function of the samples, which views (inspect, load's target
// watch, the web page, compare) hold.
func RuntimeBetween(a, b *goruntime.Sample) *goruntime.Window {
	w := &goruntime.Window{Start: a.Time, End: b.Time, Duration: b.Time.Sub(a.Time), Source: b.Source,
		Known: a.Known & b.Known}
	sec := w.Duration.Seconds()
	if sec <= 0 {
		sec = math.NaN()
	}
	k := w.Known
	nan := math.NaN()
	w.PauseP50, w.PauseP99, w.PauseMax = nan, nan, nan
	w.GCCPUShare, w.AssistShare, w.GCCPUCores = nan, nan, nan
	w.SchedP50, w.SchedP99 = nan, nan
	if b.Known.Has(goruntime.KnownGoroutines) {
		w.Goroutines = b.Goroutines
		w.Known |= goruntime.KnownGoroutines
		if a.Known.Has(goruntime.KnownGoroutines) {
			w.GoroutinesDelta = int64(b.Goroutines) - int64(a.Goroutines)
		}
	}
	if k.Has(goruntime.KnownGoroutinesCreated) {
		w.CreatedPerSec = float64(proc.Delta(a.GoroutinesCreated, b.GoroutinesCreated)) / sec
	}
	w.Running, w.Runnable, w.Waiting, w.NotInGo = b.Running, b.Runnable, b.Waiting, b.NotInGo
	w.Threads, w.GOMAXPROCS = b.Threads, b.GOMAXPROCS
	w.Known |= b.Known & (goruntime.KnownGoroutineStates | goruntime.KnownThreads | goruntime.KnownGOMAXPROCS | goruntime.KnownHeapLive |
		goruntime.KnownHeapObjects | goruntime.KnownHeapGoal | goruntime.KnownScan | goruntime.KnownGCCPUFraction | goruntime.KnownHeapAlloc | goruntime.KnownRecentPauses)
	w.HeapAlloc, w.RecentPauses = b.HeapAlloc, b.RecentPauses
	w.HeapLive, w.HeapObjects, w.HeapGoal = b.HeapLive, b.HeapObjects, b.HeapGoal
	w.ScanStack, w.ScanHeap, w.ScanGlobals = b.ScanStack, b.ScanHeap, b.ScanGlobals
	w.GCCPUFraction = b.GCCPUFraction
	if k.Has(goruntime.KnownGCCycles) {
		w.GCCycles = proc.Delta(a.GCCycles, b.GCCycles)
		w.GCCyclesPerSec = float64(w.GCCycles) / sec
	}
	if k.Has(goruntime.KnownGCPauses) {
		w.GCPauses = HistogramBetween(a.GCPauses, b.GCPauses)
		w.PauseP50, w.PauseP99, w.PauseMax = w.GCPauses.Quantile(0.5), w.GCPauses.Quantile(0.99), w.GCPauses.Max()
	}
	if !k.Has(goruntime.KnownGCPauses) && k.Has(goruntime.KnownGCCycles) && len(b.Pauses) > 0 {
		// MemStats sources: the pauses of the cycles that ended in the
		// window, when the ring still holds them all.
		var ps []float64
		for _, p := range b.Pauses {
			if p.GC > a.GCCycles && p.GC <= b.GCCycles {
				ps = append(ps, p.Sec)
			}
		}
		if uint64(len(ps)) == w.GCCycles && len(ps) > 0 {
			sort.Float64s(ps)
			w.PauseP50, w.PauseP99, w.PauseMax = exactQuantile(ps, 0.5), exactQuantile(ps, 0.99), ps[len(ps)-1]
			w.Known |= goruntime.KnownGCPauses
		} else if w.GCCycles > 0 {
			w.Notes = append(w.Notes, "GC pauses: more cycles in the window than MemStats keeps (256)")
		}
	}
	if k.Has(goruntime.KnownAllocs) {
		w.AllocBytesPerSec = float64(proc.Delta(a.AllocBytes, b.AllocBytes)) / sec
		w.AllocObjectsPerSec = float64(proc.Delta(a.AllocObjects, b.AllocObjects)) / sec
	}
	if k.Has(goruntime.KnownCPUClasses) {
		switch {
		case !k.Has(goruntime.KnownGCCycles):
			w.Known &^= goruntime.KnownCPUClasses
		case w.GCCycles < 2:
			w.Notes = append(w.Notes, fmt.Sprintf(
				"GC CPU and assist shares need at least 2 GC cycles in the window (%d ended): the runtime updates its CPU classes only when a cycle ends; use a longer --duration", w.GCCycles))
		default:
			busy := b.CPU.Busy() - a.CPU.Busy()
			gc := b.CPU.GCTotal - a.CPU.GCTotal
			if busy > 0 {
				w.GCCPUShare = gc / busy
				w.AssistShare = (b.CPU.GCAssist - a.CPU.GCAssist) / busy
			}
			w.GCCPUCores = gc / sec
			if b.CPU.GCIdle-a.CPU.GCIdle > 0.25*gc {
				w.Notes = append(w.Notes, "GC CPU share includes idle mark workers (GC run on otherwise idle Ps); it overstates the GC's cost in a mostly idle program")
			}
		}
	}
	if k.Has(goruntime.KnownSchedLatency) {
		w.SchedLatency = HistogramBetween(a.SchedLatency, b.SchedLatency)
		w.SchedSamples = w.SchedLatency.Total()
		w.SchedP50, w.SchedP99 = w.SchedLatency.Quantile(0.5), w.SchedLatency.Quantile(0.99)
		w.Notes = append(w.Notes, goruntime.SchedSamplingNote)
	}
	if k.Has(goruntime.KnownMutexWait) {
		w.MutexWaitPerSec = max(b.MutexWait-a.MutexWait, 0) / sec
	}
	if b.Known.Has(goruntime.KnownGODEBUG) {
		for name, v := range b.GODEBUG {
			if v == 0 {
				continue
			}
			if w.GODEBUGTotal == nil {
				w.GODEBUGTotal = map[string]uint64{}
			}
			w.GODEBUGTotal[name] = v
			if d := proc.Delta(a.GODEBUG[name], v); d > 0 {
				if w.GODEBUG == nil {
					w.GODEBUG = map[string]uint64{}
				}
				w.GODEBUG[name] = d
			}
		}
	}
	return w
}

// exactQuantile returns the q-quantile of sorted values (nearest rank).
func exactQuantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(min(i, len(sorted)-1), 0)]
}

// HistogramBetween is what a histogram of the runtime (counts by bucket) counted
// from its reading earlier to its reading later: later's counts minus
// earlier's, bucket by bucket (a count that went back counts nothing).
// When the bucket layouts differ, or earlier is nil, it is a copy of later.
func HistogramBetween(earlier, later *goruntime.Histogram) *goruntime.Histogram {
	if later == nil {
		return nil
	}
	out := &goruntime.Histogram{Counts: slices.Clone(later.Counts), Buckets: later.Buckets}
	if earlier == nil || len(earlier.Counts) != len(later.Counts) {
		return out
	}
	for i := range out.Counts {
		out.Counts[i] = proc.Delta(earlier.Counts[i], later.Counts[i])
	}
	return out
}
