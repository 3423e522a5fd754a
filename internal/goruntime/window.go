package goruntime

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Window is what two samples of one program tell about the time between
// them. Gauges (goroutines, heap, threads) are the later sample's values;
// rates and distributions are of the deltas. A figure whose Known bit is
// clear is unknown; a figure that is known but not meaningful in this window
// (a GC share over fewer than two cycles) is NaN, with the reason in Notes.
type Window struct {
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	Duration time.Duration `json:"duration_ns"`
	Source   string        `json:"source"`
	Known    Known         `json:"-"`

	Goroutines      uint64 `json:"goroutines"`
	GoroutinesDelta int64  `json:"goroutines_delta"`
	// CreatedPerSec is goroutines created per second.
	CreatedPerSec                       float64 `json:"goroutines_created_per_sec"`
	Running, Runnable, Waiting, NotInGo uint64
	Threads                             uint64 `json:"threads"`
	GOMAXPROCS                          uint64 `json:"gomaxprocs"`

	// GCCycles ended in the window, and per second.
	GCCycles       uint64  `json:"gc_cycles"`
	GCCyclesPerSec float64 `json:"gc_cycles_per_sec"`
	// GCPauses is the delta distribution of GC pauses (seconds); PauseP50,
	// PauseP99 and PauseMax summarise it (NaN when no pause was recorded).
	GCPauses                     *Histogram `json:"-"`
	PauseP50, PauseP99, PauseMax float64
	// GCCPUShare and AssistShare are the GC's and mark assist's shares of
	// the program's busy (non-idle) CPU time, from /cpu/classes over the
	// window; NaN unless at least two GC cycles ended in it (the classes
	// only move at the end of a cycle). GCCPUCores is GC CPU-seconds per
	// second, same condition.
	GCCPUShare  float64 `json:"gc_cpu_share"`
	AssistShare float64 `json:"assist_share"`
	GCCPUCores  float64 `json:"gc_cpu_cores"`
	// GCCPUFraction is MemStats.GCCPUFraction of the later sample (since
	// start, for sources without /cpu/classes).
	GCCPUFraction float64 `json:"gc_cpu_fraction"`

	HeapLive, HeapObjects, HeapGoal uint64
	HeapAlloc                       uint64 `json:"heap_alloc_bytes"`
	// RecentPauses are the later sample's pause quantiles over the
	// program's last pauses (not this window), for Prometheus sources.
	RecentPauses                     []Quantile `json:"recent_pauses,omitempty"`
	ScanStack, ScanHeap, ScanGlobals uint64
	// AllocBytesPerSec and AllocObjectsPerSec are heap allocation rates.
	AllocBytesPerSec, AllocObjectsPerSec float64

	// SchedLatency is the delta distribution of scheduling latency; SchedP50
	// and SchedP99 its quantiles in seconds (NaN when empty). SchedSamples
	// is how many transitions were recorded: about one in eight.
	SchedLatency       *Histogram `json:"-"`
	SchedP50, SchedP99 float64
	SchedSamples       uint64 `json:"sched_samples"`
	// MutexWaitPerSec is seconds of mutex wait per second of wall time
	// (summed over goroutines, so it can exceed 1).
	MutexWaitPerSec float64 `json:"mutex_wait_per_sec"`
	// GODEBUG holds the non-default-behaviour events counted in the window
	// (only settings whose counter moved) and GODEBUGTotal those counted
	// since start (only non-zero ones).
	GODEBUG      map[string]uint64 `json:"godebug_events,omitempty"`
	GODEBUGTotal map[string]uint64 `json:"godebug_events_total,omitempty"`

	// Notes explain figures left out or to be read with care.
	Notes []string `json:"notes,omitempty"`
}

// SchedSamplingNote explains /sched/latencies' sampling.
const SchedSamplingNote = "scheduling latency: the runtime records about 1 goroutine transition in 8"

// NewWindow computes the window from an earlier sample a to a later sample b
// of the same program. It is a pure function: the doctor and the load
// generator call it on samples they hold. Known is the intersection of the
// samples' bits.
func NewWindow(a, b *Sample) *Window {
	w := &Window{Start: a.Time, End: b.Time, Duration: b.Time.Sub(a.Time), Source: b.Source,
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
	if b.Known.Has(KnownGoroutines) {
		w.Goroutines = b.Goroutines
		w.Known |= KnownGoroutines
		if a.Known.Has(KnownGoroutines) {
			w.GoroutinesDelta = int64(b.Goroutines) - int64(a.Goroutines)
		}
	}
	if k.Has(KnownGoroutinesCreated) {
		w.CreatedPerSec = float64(proc.Delta(a.GoroutinesCreated, b.GoroutinesCreated)) / sec
	}
	w.Running, w.Runnable, w.Waiting, w.NotInGo = b.Running, b.Runnable, b.Waiting, b.NotInGo
	w.Threads, w.GOMAXPROCS = b.Threads, b.GOMAXPROCS
	w.Known |= b.Known & (KnownGoroutineStates | KnownThreads | KnownGOMAXPROCS | KnownHeapLive |
		KnownHeapObjects | KnownHeapGoal | KnownScan | KnownGCCPUFraction | KnownHeapAlloc | KnownRecentPauses)
	w.HeapAlloc, w.RecentPauses = b.HeapAlloc, b.RecentPauses
	w.HeapLive, w.HeapObjects, w.HeapGoal = b.HeapLive, b.HeapObjects, b.HeapGoal
	w.ScanStack, w.ScanHeap, w.ScanGlobals = b.ScanStack, b.ScanHeap, b.ScanGlobals
	w.GCCPUFraction = b.GCCPUFraction
	if k.Has(KnownGCCycles) {
		w.GCCycles = proc.Delta(a.GCCycles, b.GCCycles)
		w.GCCyclesPerSec = float64(w.GCCycles) / sec
	}
	if k.Has(KnownGCPauses) {
		w.GCPauses = b.GCPauses.Sub(a.GCPauses)
		w.PauseP50, w.PauseP99, w.PauseMax = w.GCPauses.Quantile(0.5), w.GCPauses.Quantile(0.99), w.GCPauses.Max()
	}
	if !k.Has(KnownGCPauses) && k.Has(KnownGCCycles) && len(b.pauses) > 0 {
		// MemStats sources: the pauses of the cycles that ended in the
		// window, when the ring still holds them all.
		var ps []float64
		for _, p := range b.pauses {
			if p.gc > a.GCCycles && p.gc <= b.GCCycles {
				ps = append(ps, p.sec)
			}
		}
		if uint64(len(ps)) == w.GCCycles && len(ps) > 0 {
			sort.Float64s(ps)
			w.PauseP50, w.PauseP99, w.PauseMax = exactQuantile(ps, 0.5), exactQuantile(ps, 0.99), ps[len(ps)-1]
			w.Known |= KnownGCPauses
		} else if w.GCCycles > 0 {
			w.Notes = append(w.Notes, "GC pauses: more cycles in the window than MemStats keeps (256)")
		}
	}
	if k.Has(KnownAllocs) {
		w.AllocBytesPerSec = float64(proc.Delta(a.AllocBytes, b.AllocBytes)) / sec
		w.AllocObjectsPerSec = float64(proc.Delta(a.AllocObjects, b.AllocObjects)) / sec
	}
	if k.Has(KnownCPUClasses) {
		switch {
		case !k.Has(KnownGCCycles):
			w.Known &^= KnownCPUClasses
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
	if k.Has(KnownSchedLatency) {
		w.SchedLatency = b.SchedLatency.Sub(a.SchedLatency)
		w.SchedSamples = w.SchedLatency.Total()
		w.SchedP50, w.SchedP99 = w.SchedLatency.Quantile(0.5), w.SchedLatency.Quantile(0.99)
		w.Notes = append(w.Notes, SchedSamplingNote)
	}
	if k.Has(KnownMutexWait) {
		w.MutexWaitPerSec = max(b.MutexWait-a.MutexWait, 0) / sec
	}
	if b.Known.Has(KnownGODEBUG) {
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
