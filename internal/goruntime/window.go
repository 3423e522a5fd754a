package goruntime

import "time"

// Window is what two samples of one program tell about the time between
// them, as window.RuntimeBetween (the window layer, where every interval
// in gosleuth is subtracted) computes it. Gauges (goroutines, heap, threads) are the later sample's values;
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
