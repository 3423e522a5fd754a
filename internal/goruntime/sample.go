package goruntime

import (
	"math"
	"sort"
	"strings"
	"time"
)

// Known bits say which fields of a Sample (and of a Window) the source
// could give. A field whose bit is clear is unknown, not zero.
type Known uint32

// The fields of a Sample.
const (
	KnownGoroutines        Known = 1 << iota // Goroutines
	KnownGoroutinesCreated                   // GoroutinesCreated (Go 1.26 runtime/metrics)
	KnownGoroutineStates                     // Running, Runnable, Waiting, NotInGo (Go 1.26)
	KnownThreads                             // Threads
	KnownGOMAXPROCS                          // GOMAXPROCS
	KnownGCCycles                            // GCCycles
	KnownGCPauses                            // GCPauses
	KnownHeapLive                            // HeapLive
	KnownHeapObjects                         // HeapObjects
	KnownHeapGoal                            // HeapGoal
	KnownScan                                // ScanStack, ScanHeap, ScanGlobals
	KnownAllocs                              // AllocBytes, AllocObjects
	KnownCPUClasses                          // CPU
	KnownSchedLatency                        // SchedLatency
	KnownMutexWait                           // MutexWait
	KnownGODEBUG                             // GODEBUG
	KnownGCCPUFraction                       // GCCPUFraction (MemStats sources only)
	KnownHeapAlloc                           // HeapAlloc
	KnownRecentPauses                        // RecentPauses (Prometheus summary)
)

// Has reports whether every bit of want is set.
func (k Known) Has(want Known) bool { return k&want == want }

// Sample is one point-in-time reading of a Go program's runtime, from any
// source. Counters are cumulative since the program started; the window
// layer turns two samples into rates (window.RuntimeBetween). Fields whose Known bit is clear are
// unknown to the source.
type Sample struct {
	// Time is when the reading was taken (by the program when the source
	// says, otherwise when the reply arrived).
	Time time.Time `json:"time"`
	// Source names where it came from: "agent", "pprof", "expvar",
	// "prometheus".
	Source string `json:"source"`
	// GoVersion is the program's Go version when the source tells it.
	GoVersion string `json:"go_version,omitempty"`
	Known     Known  `json:"-"`

	Goroutines        uint64 `json:"goroutines"`
	GoroutinesCreated uint64 `json:"goroutines_created"`
	// Running, Runnable, Waiting and NotInGo split Goroutines by state
	// (Go 1.26 /sched/goroutines/*).
	Running    uint64 `json:"running"`
	Runnable   uint64 `json:"runnable"`
	Waiting    uint64 `json:"waiting"`
	NotInGo    uint64 `json:"not_in_go"`
	Threads    uint64 `json:"threads"`
	GOMAXPROCS uint64 `json:"gomaxprocs"`

	// GCCycles counts completed GC cycles; GCPauses is the distribution of
	// GC stop-the-world pause times in seconds (for sources that only give
	// recent pauses or quantiles, an approximation: see the source).
	GCCycles uint64     `json:"gc_cycles"`
	GCPauses *Histogram `json:"-"`
	// HeapLive is the heap marked live by the last GC, HeapObjects the
	// objects in the heap (including unswept dead ones), HeapGoal the size
	// at which the next GC starts.
	HeapLive    uint64 `json:"heap_live_bytes"`
	HeapObjects uint64 `json:"heap_objects"`
	HeapGoal    uint64 `json:"heap_goal_bytes"`
	// HeapAlloc is the bytes of heap objects, live or not yet swept
	// (MemStats.HeapAlloc, /memory/classes/heap/objects:bytes).
	HeapAlloc uint64 `json:"heap_alloc_bytes"`
	// ScanStack, ScanHeap and ScanGlobals are the scannable bytes the GC
	// must work through.
	ScanStack   uint64 `json:"scan_stack_bytes"`
	ScanHeap    uint64 `json:"scan_heap_bytes"`
	ScanGlobals uint64 `json:"scan_globals_bytes"`
	// AllocBytes and AllocObjects are cumulative heap allocations.
	AllocBytes   uint64 `json:"alloc_bytes"`
	AllocObjects uint64 `json:"alloc_objects"`

	// CPU holds the /cpu/classes counters, in CPU-seconds. They only move
	// at the end of a GC cycle.
	CPU CPUClasses `json:"cpu_classes"`
	// GCCPUFraction is runtime.MemStats.GCCPUFraction, the GC's share of
	// the CPU available since the program started (MemStats sources).
	GCCPUFraction float64 `json:"gc_cpu_fraction"`

	// SchedLatency is the distribution of the time goroutines spent
	// runnable before running, in seconds; the runtime records about one
	// transition in eight.
	SchedLatency *Histogram `json:"-"`
	// MutexWait is the cumulative time goroutines spent blocked on
	// sync.Mutex, sync.RWMutex and runtime locks, in seconds.
	MutexWait float64 `json:"mutex_wait_seconds"`
	// GODEBUG counts, per setting, the times the program's behaviour
	// differed from the default because of a non-default GODEBUG value
	// (/godebug/non-default-behavior/NAME:events).
	GODEBUG map[string]uint64 `json:"godebug_events,omitempty"`

	// RecentPauses are quantiles of the program's last GC pauses (up to
	// 256, whenever they happened), as client_golang's go_gc_duration_seconds
	// summary gives them; set by Prometheus sources lacking a histogram.
	RecentPauses []Quantile `json:"recent_pauses,omitempty"`
	// Pauses are MemStats' recent GC pauses, newest first (up to 256;
	// set by sources that read MemStats).
	Pauses []Pause `json:"-"`

	// Raw is the full catalog as read, for sources that give
	// runtime/metrics (the agent); nil otherwise.
	Raw map[string]Metric `json:"-"`
}

// Quantile is one quantile of a distribution, in seconds.
type Quantile struct {
	Q       float64 `json:"q"`
	Seconds float64 `json:"seconds"`
}

// Pause is the pause of GC cycle number GC (1-based), in seconds.
type Pause struct {
	GC  uint64
	Sec float64
}

// CPUClasses are the runtime's /cpu/classes estimates, in CPU-seconds.
type CPUClasses struct {
	Total, User, Idle                      float64
	GCTotal, GCAssist, GCDedicated, GCIdle float64
	GCPause, ScavengeTotal, ScavengeAssist float64
	ScavengeBackground                     float64
}

// Busy is the non-idle CPU time: Total minus Idle.
func (c CPUClasses) Busy() float64 { return c.Total - c.Idle }

// Metric is one runtime/metrics value.
type Metric struct {
	// Kind is 'u' (uint64), 'f' (float64), 'h' (histogram) or 'x' (a kind
	// the agent could not encode).
	Kind  byte
	Uint  uint64
	Float float64
	Hist  *Histogram
}

// Value returns a scalar metric as a float64 (0 for histograms).
func (m Metric) Value() float64 {
	if m.Kind == 'u' {
		return float64(m.Uint)
	}
	return m.Float
}

// Histogram is a runtime/metrics Float64Histogram: Counts[i] values fell in
// [Buckets[i], Buckets[i+1]).
type Histogram struct {
	Counts  []uint64  `json:"counts"`
	Buckets []float64 `json:"buckets"`
}

// Total returns the number of values counted.
func (h *Histogram) Total() uint64 {
	if h == nil {
		return 0
	}
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 <= q <= 1) as the upper bound of the
// bucket holding it, the convention runtime/metrics users follow; for an
// infinite upper bound, the lower bound. NaN when the histogram is empty.
func (h *Histogram) Quantile(q float64) float64 {
	n := h.Total()
	if n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(n)))
	if rank == 0 {
		rank = 1
	}
	var cum uint64
	for i, c := range h.Counts {
		cum += c
		if cum >= rank {
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				return h.Buckets[i]
			}
			return hi
		}
	}
	return h.Buckets[len(h.Buckets)-1]
}

// Max returns the upper bound of the highest non-empty bucket (the lower
// bound when that is +Inf), NaN when empty.
func (h *Histogram) Max() float64 {
	if h == nil {
		return math.NaN()
	}
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] > 0 {
			if math.IsInf(h.Buckets[i+1], 1) {
				return h.Buckets[i]
			}
			return h.Buckets[i+1]
		}
	}
	return math.NaN()
}

// godebugPrefix starts the names of the non-default-behaviour counters.
const godebugPrefix = "/godebug/non-default-behavior/"

// sampleFromMetrics fills s from a runtime/metrics catalog keyed by name,
// setting the Known bits of what it holds. Older Go versions lack some
// metrics; those stay unknown.
func sampleFromMetrics(s *Sample, m map[string]Metric) {
	s.Raw = m
	u := func(name string, dst *uint64, bit Known) bool {
		if v, ok := m[name]; ok && v.Kind == 'u' {
			*dst = v.Uint
			s.Known |= bit
			return true
		}
		return false
	}
	f := func(name string, dst *float64) bool {
		if v, ok := m[name]; ok && v.Kind == 'f' {
			*dst = v.Float
			return true
		}
		return false
	}
	hist := func(name string) *Histogram {
		if v, ok := m[name]; ok && v.Kind == 'h' {
			return v.Hist
		}
		return nil
	}
	u("/sched/goroutines:goroutines", &s.Goroutines, KnownGoroutines)
	u("/sched/goroutines-created:goroutines", &s.GoroutinesCreated, KnownGoroutinesCreated)
	if u("/sched/goroutines/running:goroutines", &s.Running, 0) &&
		u("/sched/goroutines/runnable:goroutines", &s.Runnable, 0) &&
		u("/sched/goroutines/waiting:goroutines", &s.Waiting, 0) &&
		u("/sched/goroutines/not-in-go:goroutines", &s.NotInGo, 0) {
		s.Known |= KnownGoroutineStates
	}
	u("/sched/threads/total:threads", &s.Threads, KnownThreads)
	u("/sched/gomaxprocs:threads", &s.GOMAXPROCS, KnownGOMAXPROCS)
	u("/gc/cycles/total:gc-cycles", &s.GCCycles, KnownGCCycles)
	if h := hist("/sched/pauses/total/gc:seconds"); h != nil {
		s.GCPauses, s.Known = h, s.Known|KnownGCPauses
	} else if h := hist("/gc/pauses:seconds"); h != nil {
		s.GCPauses, s.Known = h, s.Known|KnownGCPauses
	}
	u("/gc/heap/live:bytes", &s.HeapLive, KnownHeapLive)
	u("/gc/heap/objects:objects", &s.HeapObjects, KnownHeapObjects)
	u("/gc/heap/goal:bytes", &s.HeapGoal, KnownHeapGoal)
	u("/memory/classes/heap/objects:bytes", &s.HeapAlloc, KnownHeapAlloc)
	if u("/gc/scan/stack:bytes", &s.ScanStack, 0) && u("/gc/scan/heap:bytes", &s.ScanHeap, 0) &&
		u("/gc/scan/globals:bytes", &s.ScanGlobals, 0) {
		s.Known |= KnownScan
	}
	if u("/gc/heap/allocs:bytes", &s.AllocBytes, 0) && u("/gc/heap/allocs:objects", &s.AllocObjects, 0) {
		s.Known |= KnownAllocs
	}
	c := &s.CPU
	if f("/cpu/classes/total:cpu-seconds", &c.Total) && f("/cpu/classes/idle:cpu-seconds", &c.Idle) &&
		f("/cpu/classes/gc/total:cpu-seconds", &c.GCTotal) && f("/cpu/classes/gc/mark/assist:cpu-seconds", &c.GCAssist) {
		s.Known |= KnownCPUClasses
		f("/cpu/classes/user:cpu-seconds", &c.User)
		f("/cpu/classes/gc/mark/dedicated:cpu-seconds", &c.GCDedicated)
		f("/cpu/classes/gc/mark/idle:cpu-seconds", &c.GCIdle)
		f("/cpu/classes/gc/pause:cpu-seconds", &c.GCPause)
		f("/cpu/classes/scavenge/total:cpu-seconds", &c.ScavengeTotal)
		f("/cpu/classes/scavenge/assist:cpu-seconds", &c.ScavengeAssist)
		f("/cpu/classes/scavenge/background:cpu-seconds", &c.ScavengeBackground)
	}
	if h := hist("/sched/latencies:seconds"); h != nil {
		s.SchedLatency, s.Known = h, s.Known|KnownSchedLatency
	}
	if f("/sync/mutex/wait/total:seconds", &s.MutexWait) {
		s.Known |= KnownMutexWait
	}
	for name, v := range m {
		if rest, ok := strings.CutPrefix(name, godebugPrefix); ok && v.Kind == 'u' {
			if s.GODEBUG == nil {
				s.GODEBUG = make(map[string]uint64)
			}
			s.GODEBUG[strings.TrimSuffix(rest, ":events")] = v.Uint
			s.Known |= KnownGODEBUG
		}
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
