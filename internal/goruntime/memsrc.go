package goruntime

import (
	"context"
	"fmt"
	"sort"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// memSource reads a Go program's runtime from its memory (package gomem):
// any Go program, no agent, no endpoint, no pause. Its samples carry the
// goroutines by state, threads, GOMAXPROCS, GC cycles, heap live and goal,
// scannable bytes, cumulative allocations and the GC's CPU classes; its
// goroutine dump is grouped from unwound stacks.
type memSource struct {
	p *gomem.Process
}

// newMemSource opens process pid's runtime memory.
func newMemSource(pfs proc.FS, pid int) (*memSource, error) {
	p, err := gomem.Open(pfs, pid)
	if err != nil {
		return nil, err
	}
	return &memSource{p: p}, nil
}

func (s *memSource) Kind() string { return "memory" }

// Addr names the process and how its runtime was located.
func (s *memSource) Addr() string {
	return fmt.Sprintf("/proc/%d/mem (%s, layout from %s)", s.p.PID, s.p.GoVersion, s.p.Layout.From)
}

func (s *memSource) Close() error { return s.p.Close() }

// Process is the reader behind the source, for views that want more than
// a Sample (the heap profile, the census's groups, the timers).
func (s *memSource) Process() *gomem.Process { return s.p }

// MemoryReader is implemented by sources that read the runtime from the
// process's memory.
type MemoryReader interface {
	Process() *gomem.Process
}

func (s *memSource) Read(ctx context.Context) (*Sample, error) {
	c, err := s.p.Census(gomem.CensusOptions{Counts: true})
	if err != nil {
		return nil, fmt.Errorf("read goroutines from memory: %w", err)
	}
	st, err := s.p.StatsCounts()
	if err != nil {
		return nil, fmt.Errorf("read runtime statistics from memory: %w", err)
	}
	smp := sampleFromMemory(s.p.GoVersion, c, st)
	smp.Raw = rawFromMemory(smp, st)
	return smp, nil
}

// rawFromMemory names what the memory source read as the runtime/metrics
// values that mean the same, for consumers of the catalog (the exporter):
// only known fields are named.
func rawFromMemory(smp *Sample, st *gomem.Stats) map[string]Metric {
	m := map[string]Metric{}
	u := func(name string, v uint64) { m[name] = Metric{Kind: 'u', Uint: v} }
	f := func(name string, v float64) { m[name] = Metric{Kind: 'f', Float: v} }
	k := smp.Known
	if k.Has(KnownGoroutines) {
		u("/sched/goroutines:goroutines", smp.Goroutines)
	}
	if k.Has(KnownGoroutinesCreated) {
		u("/sched/goroutines-created:goroutines", smp.GoroutinesCreated)
	}
	if k.Has(KnownGoroutineStates) {
		u("/sched/goroutines/running:goroutines", smp.Running)
		u("/sched/goroutines/runnable:goroutines", smp.Runnable)
		u("/sched/goroutines/waiting:goroutines", smp.Waiting)
		u("/sched/goroutines/not-in-go:goroutines", smp.NotInGo)
	}
	if k.Has(KnownThreads) {
		u("/sched/threads/total:threads", smp.Threads)
	}
	if k.Has(KnownGOMAXPROCS) {
		u("/sched/gomaxprocs:threads", smp.GOMAXPROCS)
	}
	if k.Has(KnownGCCycles) {
		u("/gc/cycles/total:gc-cycles", smp.GCCycles)
		u("/gc/cycles/forced:gc-cycles", uint64(st.ForcedGC))
		u("/gc/gogc:percent", uint64(max(st.GOGC, 0)))
		u("/gc/gomemlimit:bytes", uint64(max(st.MemoryLimit, 0)))
	}
	if k.Has(KnownHeapLive) {
		u("/gc/heap/live:bytes", smp.HeapLive)
	}
	if k.Has(KnownHeapGoal) {
		u("/gc/heap/goal:bytes", smp.HeapGoal)
	}
	if k.Has(KnownScan) {
		u("/gc/scan/heap:bytes", smp.ScanHeap)
		u("/gc/scan/stack:bytes", smp.ScanStack)
		u("/gc/scan/globals:bytes", smp.ScanGlobals)
		u("/gc/scan/total:bytes", smp.ScanHeap+smp.ScanStack+smp.ScanGlobals)
	}
	if k.Has(KnownAllocs) {
		u("/gc/heap/allocs:bytes", smp.AllocBytes)
		u("/gc/heap/allocs:objects", smp.AllocObjects)
		u("/gc/heap/frees:objects", st.FreeObjects)
		u("/memory/classes/heap/stacks:bytes", st.StackInUse)
	}
	if k.Has(KnownCPUClasses) {
		c := smp.CPU
		f("/cpu/classes/total:cpu-seconds", c.Total)
		f("/cpu/classes/idle:cpu-seconds", c.Idle)
		f("/cpu/classes/user:cpu-seconds", c.User)
		f("/cpu/classes/gc/total:cpu-seconds", c.GCTotal)
		f("/cpu/classes/gc/mark/assist:cpu-seconds", c.GCAssist)
		f("/cpu/classes/gc/mark/dedicated:cpu-seconds", c.GCDedicated)
		f("/cpu/classes/gc/mark/idle:cpu-seconds", c.GCIdle)
		f("/cpu/classes/gc/pause:cpu-seconds", c.GCPause)
	}
	return m
}

// sampleFromMemory turns a census and statistics into a Sample. Goroutines
// counts the program's goroutines as runtime.NumGoroutine does (without
// the runtime's own).
func sampleFromMemory(goVersion string, c *gomem.Census, st *gomem.Stats) *Sample {
	smp := &Sample{Time: st.Time, Source: "memory", GoVersion: goVersion}
	smp.Goroutines = uint64(c.Total - c.System)
	smp.Known |= KnownGoroutines
	if c.CreatedKnown {
		smp.GoroutinesCreated = c.Created
		smp.Known |= KnownGoroutinesCreated
	}
	// Counts only (no names): the runtime's own goroutines are nearly all
	// parked, so they come off the waiting ones.
	for state, n := range c.ByState {
		switch state {
		case "running":
			smp.Running += uint64(n)
		case "runnable":
			smp.Runnable += uint64(n)
		case "syscall":
			smp.NotInGo += uint64(n)
		default:
			smp.Waiting += uint64(n)
		}
	}
	smp.Waiting -= min(smp.Waiting, uint64(c.System))
	smp.Known |= KnownGoroutineStates
	// A field is known where it was read, not merely where no error
	// named it (a variable not located leaves all its fields unread).
	has := func(fields ...string) bool {
		for _, f := range fields {
			if !st.Has(f) {
				return false
			}
		}
		return true
	}
	const gc = "runtime.gcControllerState."
	if st.Threads > 0 {
		smp.Threads = uint64(st.Threads)
		smp.Known |= KnownThreads
	}
	if st.GOMAXPROCS > 0 {
		smp.GOMAXPROCS = uint64(st.GOMAXPROCS)
		smp.Known |= KnownGOMAXPROCS
	}
	if has("runtime.mstats.numgc") {
		smp.GCCycles = uint64(st.GCCycles)
		smp.Known |= KnownGCCycles
	}
	if has(gc + "heapMarked") {
		smp.HeapLive = st.HeapMarked
		smp.Known |= KnownHeapLive
	}
	if has(gc + "heapLive") {
		// The runtime's heapLive: bytes in spans in use for objects,
		// live at the last GC or allocated since (MemStats.HeapAlloc
		// counts the same objects, less the unused parts of the Ps'
		// cached spans).
		smp.HeapAlloc = st.HeapLive
		smp.Known |= KnownHeapAlloc
	}
	if has(gc + "gcPercentHeapGoal") {
		smp.HeapGoal = st.HeapGoal
		smp.Known |= KnownHeapGoal
	}
	if has(gc+"heapScan", gc+"lastStackScan", gc+"globalsScan") {
		smp.ScanHeap, smp.ScanStack, smp.ScanGlobals = st.ScanHeap, st.ScanStack, st.ScanGlobals
		smp.Known |= KnownScan
	}
	if has("heap statistics") {
		smp.AllocBytes, smp.AllocObjects = st.AllocBytes, st.AllocObjects
		smp.HeapObjects = st.AllocObjects - min(st.FreeObjects, st.AllocObjects)
		smp.Known |= KnownAllocs | KnownHeapObjects
	}
	if has("runtime.cpuStats.TotalTime", "runtime.cpuStats.IdleTime", "runtime.cpuStats.UserTime", "runtime.cpuStats.GCTotalTime",
		"runtime.cpuStats.GCAssistTime", "runtime.cpuStats.GCDedicatedTime", "runtime.cpuStats.GCIdleTime", "runtime.cpuStats.GCPauseTime") {
		sec := func(d interface{ Seconds() float64 }) float64 { return d.Seconds() }
		smp.CPU = CPUClasses{
			Total: sec(st.CPUTotal), Idle: sec(st.CPUIdle), User: sec(st.CPUUser), GCTotal: sec(st.GCTotal), GCAssist: sec(st.GCAssist),
			GCDedicated: sec(st.GCDedicated), GCIdle: sec(st.GCIdle), GCPause: sec(st.GCPause),
		}
		smp.Known |= KnownCPUClasses
	}
	if has("runtime.mstats.gc_cpu_fraction") {
		smp.GCCPUFraction = st.GCCPUFraction
		smp.Known |= KnownGCCPUFraction
	}
	return smp
}

// Goroutines returns the goroutines grouped by identical stacks, from
// stacks unwound in memory (running goroutines, whose saved registers are
// stale, are counted by their start function only).
func (s *memSource) Goroutines(ctx context.Context) (*GoroutineDump, error) {
	c, err := s.p.Census(gomem.CensusOptions{})
	if err != nil {
		return nil, fmt.Errorf("read goroutines from memory: %w", err)
	}
	return DumpFromCensus(c), nil
}

// DumpFromCensus converts a census's unwound stacks to a GoroutineDump;
// goroutines not unwound are grouped by start function.
func DumpFromCensus(c *gomem.Census) *GoroutineDump {
	d := &GoroutineDump{Total: c.Total - c.System}
	for _, sg := range c.Stacks {
		if sg.System {
			continue // as the runtime's goroutine profile, without its own
		}
		g := GoroutineGroup{Count: sg.Count, State: sg.State, States: map[string]int{sg.State: sg.Count}}
		for _, f := range sg.Frames {
			if f.Func == "runtime.goexit" {
				continue
			}
			g.Frames = append(g.Frames, Frame{Func: f.Func, File: f.File, Line: f.Line})
		}
		d.Groups = append(d.Groups, g)
	}
	// Goroutines not unwound (running ones, whose saved registers are
	// stale, or beyond the unwind bound) are grouped by start function.
	for _, g := range c.Groups {
		if rest := g.Count - g.Unwound; rest > 0 && !g.System {
			cb := Frame{Func: g.CreatedBy.Func, File: g.CreatedBy.File, Line: g.CreatedBy.Line}
			d.Groups = append(d.Groups, GoroutineGroup{Count: rest, State: g.State, States: map[string]int{g.State: rest},
				Frames: []Frame{{Func: g.Start.Func, File: g.Start.File, Line: g.Start.Line}}, CreatedBy: &cb})
		}
	}
	sort.SliceStable(d.Groups, func(i, j int) bool { return d.Groups[i].Count > d.Groups[j].Count })
	return d
}
