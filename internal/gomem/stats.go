package gomem

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"time"
)

// numSizeClasses is the runtime's count of small size classes (68 from Go
// 1.20 through 1.26), the length of heapStatsDelta's per-class arrays.
const numSizeClasses = 68

// sizeClassBytes is the object size of each small size class, the same
// in every release from Go 1.20 through 1.26 (runtime/sizeclasses.go's
// class_to_size, internal/runtime/gc's SizeClassToSize from 1.26):
// TestSizeClasses checks it against the local toolchain's source.
var sizeClassBytes = [numSizeClasses]uint16{0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
	224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536,
	1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240,
	10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// Stats is the runtime's GC, memory and scheduler state at one instant.
// Fields whose source was not readable are listed in Missing and left
// zero.
type Stats struct {
	Time       time.Time `json:"time"`
	GOMAXPROCS int       `json:"gomaxprocs"`

	// GC: completed and forced cycles, the last one's end, the total
	// stop-the-world pause, GOGC (-1: off) and the memory limit.
	GCCycles      uint32        `json:"gc_cycles"`
	ForcedGC      uint32        `json:"forced_gc"`
	LastGC        time.Time     `json:"last_gc"`
	PauseTotal    time.Duration `json:"pause_total_ns"`
	GCCPUFraction float64       `json:"gc_cpu_fraction"`
	GOGC          int32         `json:"gogc"`
	MemoryLimit   int64         `json:"memory_limit_bytes"`

	// HeapMarked is the heap marked live by the last GC; HeapLive the
	// bytes in spans in use for allocation since (the runtime's heapLive);
	// HeapGoal the heap size at which the next cycle ends.
	HeapMarked uint64 `json:"heap_marked_bytes"`
	HeapLive   uint64 `json:"heap_live_bytes"`
	HeapGoal   uint64 `json:"heap_goal_bytes"`
	// ScanHeap, ScanStack and ScanGlobals are the scannable bytes the GC
	// works through.
	ScanHeap    uint64 `json:"scan_heap_bytes"`
	ScanStack   uint64 `json:"scan_stack_bytes"`
	ScanGlobals uint64 `json:"scan_globals_bytes"`

	// CPU the GC took, cumulative, as of the last completed cycle (the
	// runtime updates these at each cycle's end), in CPU time.
	GCAssist    time.Duration `json:"gc_assist_ns"`
	GCDedicated time.Duration `json:"gc_dedicated_ns"`
	GCIdle      time.Duration `json:"gc_idle_ns"`
	GCPause     time.Duration `json:"gc_pause_ns"`
	GCTotal     time.Duration `json:"gc_total_ns"`
	// CPUTotal is the CPU the runtime counts as available to it (GOMAXPROCS
	// times wall time) up to the same instant; CPUIdle the part of it no
	// goroutine used, CPUUser the part user goroutines ran.
	CPUTotal time.Duration `json:"cpu_total_ns"`
	CPUIdle  time.Duration `json:"cpu_idle_ns"`
	CPUUser  time.Duration `json:"cpu_user_ns"`

	// Memory: stacks in use, heap spans in use, and cumulative
	// allocations (objects and bytes) and frees.
	StackInUse   uint64 `json:"stack_inuse_bytes"`
	HeapInUse    uint64 `json:"heap_inuse_bytes"`
	AllocObjects uint64 `json:"alloc_objects"`
	AllocBytes   uint64 `json:"alloc_bytes"`
	FreeObjects  uint64 `json:"free_objects"`

	// Scheduler: idle Ps, spinning and idle Ms, Ms alive, the global run
	// queue and each P's local run queue.
	IdlePs     int   `json:"idle_ps"`
	SpinningMs int   `json:"spinning_ms"`
	IdleMs     int   `json:"idle_ms"`
	Threads    int   `json:"threads"`
	GlobalRunq int   `json:"global_runq"`
	LocalRunqs []int `json:"local_runqs"`
	TimersPerP []int `json:"timers_per_p"`
	// Periodic lists the periodic timers by period, shortest first (at
	// most maxPeriodic), with the function each runs.
	Periodic []PeriodicTimer `json:"periodic_timers,omitempty"`

	// Missing names what could not be read, with why.
	Missing []string `json:"missing,omitempty"`

	// read holds the fields read from memory ("runtime.mstats.numgc"),
	// and "heap statistics" when those were summed.
	read map[string]bool
}

// Has reports whether field ("runtime.mstats.numgc", or "heap
// statistics") was read, as against left zero because its variable was not
// located, its release lacks it or its memory was not readable.
func (st *Stats) Has(field string) bool { return st.read[field] }

func (st *Stats) got(field string) {
	if st.read == nil {
		st.read = map[string]bool{}
	}
	st.read[field] = true
}

// PeriodicTimer is a set of periodic timers with one period and function.
type PeriodicTimer struct {
	Period time.Duration `json:"period_ns"`
	Func   string        `json:"func"`
	Count  int           `json:"count"`
}

const (
	maxPeriodic     = 10
	maxTimersPerP   = 1 << 20
	maxTimersWalked = 100_000
)

// reader reads fields of one structure at a base address, remembering
// the first failure of each name.
type reader struct {
	p       *Process
	st      *Stats
	base    uint64
	typ     string
	missing bool
}

func (p *Process) at(st *Stats, sym, typ string) *reader {
	a, err := p.addr(sym)
	if err != nil {
		st.Missing = append(st.Missing, err.Error())
		return &reader{p: p, st: st, missing: true}
	}
	return &reader{p: p, st: st, base: a, typ: typ}
}

func (r *reader) u64(field string) uint64 {
	if r.missing {
		return 0
	}
	o, err := r.p.off(r.typ + "." + field)
	if err == nil {
		var v uint64
		if v, err = r.p.mem.U64(r.base + o); err == nil {
			r.st.got(r.typ + "." + field)
			return v
		}
	}
	r.st.Missing = append(r.st.Missing, fmt.Sprintf("%s.%s: %v", r.typ, field, err))
	return 0
}

func (r *reader) u32(field string) uint32 {
	if r.missing {
		return 0
	}
	o, err := r.p.off(r.typ + "." + field)
	if err == nil {
		var v uint32
		if v, err = r.p.mem.U32(r.base + o); err == nil {
			r.st.got(r.typ + "." + field)
			return v
		}
	}
	r.st.Missing = append(r.st.Missing, fmt.Sprintf("%s.%s: %v", r.typ, field, err))
	return 0
}

// has says whether the release's layout has the field.
func (r *reader) has(field string) bool {
	_, ok := r.p.Layout.Off(r.typ + "." + field)
	return ok && !r.missing
}

// Stats reads the runtime's GC, memory, scheduler and timer state.
func (p *Process) Stats() (*Stats, error) { return p.stats(true) }

// StatsCounts is Stats without the periodic timers' functions: naming them
// needs the executable's function table, which a reader of counts (the
// exporter's, for every Go process of a host) should not load.
func (p *Process) StatsCounts() (*Stats, error) { return p.stats(false) }

func (p *Process) stats(names bool) (*Stats, error) {
	st := &Stats{Time: time.Now()}
	p.mem.setBudget(64 << 20)
	defer p.mem.setBudget(0)
	if a, err := p.addr(symGomaxprocs); err == nil {
		if v, err := p.mem.U32(a); err == nil && v > 0 && v <= maxPs {
			st.GOMAXPROCS = int(v)
		}
	}

	ms := p.at(st, symMemstats, "runtime.mstats")
	st.GCCycles = ms.u32("numgc")
	st.ForcedGC = ms.u32("numforcedgc")
	if ns := ms.u64("last_gc_unix"); ns != 0 {
		st.LastGC = time.Unix(0, int64(ns))
	}
	st.PauseTotal = time.Duration(ms.u64("pause_total_ns"))
	if ms.has("gc_cpu_fraction") {
		st.GCCPUFraction = floatBits(ms.u64("gc_cpu_fraction"))
	}
	p.heapStats(st, ms)

	gc := p.at(st, symGCController, "runtime.gcControllerState")
	st.GOGC = int32(gc.u32("gcPercent"))
	st.MemoryLimit = int64(gc.u64("memoryLimit"))
	st.HeapMarked = gc.u64("heapMarked")
	st.HeapLive = gc.u64("heapLive")
	st.ScanHeap = gc.u64("heapScan")
	st.ScanStack = gc.u64("lastStackScan")
	st.ScanGlobals = gc.u64("globalsScan")
	st.HeapGoal = gc.u64("gcPercentHeapGoal")
	if gc.has("memoryLimitHeapGoal") {
		if lg := gc.u64("memoryLimitHeapGoal"); lg != 0 && lg < st.HeapGoal {
			st.HeapGoal = lg
		}
	}

	work := p.at(st, symWork, "runtime.workType")
	if o, err := p.off("runtime.workType.cpuStats"); err == nil && !work.missing {
		cpu := &reader{p: p, st: st, base: work.base + o, typ: "runtime.cpuStats"}
		st.GCAssist = time.Duration(cpu.u64("GCAssistTime"))
		st.GCDedicated = time.Duration(cpu.u64("GCDedicatedTime"))
		st.GCIdle = time.Duration(cpu.u64("GCIdleTime"))
		st.GCPause = time.Duration(cpu.u64("GCPauseTime"))
		st.GCTotal = time.Duration(cpu.u64("GCTotalTime"))
		st.CPUTotal = time.Duration(cpu.u64("TotalTime"))
		st.CPUIdle = time.Duration(cpu.u64("IdleTime"))
		st.CPUUser = time.Duration(cpu.u64("UserTime"))
	} else if err != nil {
		st.Missing = append(st.Missing, "GC CPU: "+err.Error())
	}

	sc := p.at(st, symSched, "runtime.schedt")
	st.IdlePs = int(int32(sc.u32("npidle")))
	st.SpinningMs = int(int32(sc.u32("nmspinning")))
	st.IdleMs = int(int32(sc.u32("nmidle")))
	if mnext, freed := sc.u64("mnext"), sc.u64("nmfreed"); mnext >= freed && mnext-freed < 1<<24 {
		st.Threads = int(mnext - freed)
	}
	switch {
	case sc.has("runq.size"):
		st.GlobalRunq = int(int32(sc.u32("runq.size")))
	case sc.has("runqsize"):
		st.GlobalRunq = int(int32(sc.u32("runqsize")))
	}
	p.perP(st, names)
	return st, nil
}

func floatBits(v uint64) float64 { return math.Float64frombits(v) }

// heapStats sums memstats.heapStats' three generations of deltas: the
// runtime's own reading (MemStats) flushes the Ps' caches first under a
// stop, which an outside reader does not, so allocations in spans cached
// by Ps count as allocated (the runtime counts a span's free slots as
// allocated when a P takes it and gives the rest back when it returns it).
func (p *Process) heapStats(st *Stats, ms *reader) {
	if ms.missing {
		return
	}
	ho, err1 := p.off("runtime.mstats.heapStats")
	so, err2 := p.off("runtime.consistentHeapStats.stats")
	size, ok := p.Layout.Size("runtime.heapStatsDelta")
	if err1 != nil || err2 != nil || !ok || size > 8192 {
		st.Missing = append(st.Missing, "heap statistics: not in the layout")
		return
	}
	f := map[string]uint64{}
	for _, n := range []string{"inHeap", "inStacks", "tinyAllocCount", "largeAlloc", "largeAllocCount", "smallAllocCount", "largeFreeCount", "smallFreeCount"} {
		o, err := p.off("runtime.heapStatsDelta." + n)
		if err != nil || o+8 > size {
			st.Missing = append(st.Missing, "heap statistics: "+n+" not in the layout")
			return
		}
		f[n] = o
	}
	buf := make([]byte, 3*size)
	if err := p.mem.ReadAt(buf, ms.base+ho+so); err != nil {
		st.Missing = append(st.Missing, "heap statistics: "+err.Error())
		return
	}
	var inHeap, inStacks int64
	for g := range 3 {
		d := buf[uint64(g)*size : uint64(g+1)*size]
		u := func(o uint64) uint64 { return binary.LittleEndian.Uint64(d[o:]) }
		inHeap += int64(u(f["inHeap"]))
		inStacks += int64(u(f["inStacks"]))
		st.AllocObjects += u(f["tinyAllocCount"]) + u(f["largeAllocCount"])
		st.AllocBytes += u(f["largeAlloc"])
		st.FreeObjects += u(f["largeFreeCount"])
		for c := 0; c < numSizeClasses; c++ {
			if f["smallAllocCount"]+uint64(c+1)*8 > size || f["smallFreeCount"]+uint64(c+1)*8 > size {
				break
			}
			n := u(f["smallAllocCount"] + uint64(c)*8)
			st.AllocObjects += n
			st.AllocBytes += n * uint64(sizeClassBytes[c])
			st.FreeObjects += u(f["smallFreeCount"] + uint64(c)*8)
		}
	}
	st.HeapInUse, st.StackInUse = uint64(max(inHeap, 0)), uint64(max(inStacks, 0))
	st.got("heap statistics")
}

// perP reads each P's run queue and timers.
func (p *Process) perP(st *Stats, names bool) {
	ps, err := p.allPs()
	if err != nil {
		st.Missing = append(st.Missing, "Ps: "+err.Error())
		return
	}
	oh, e1 := p.off("runtime.p.runqhead")
	ot, e2 := p.off("runtime.p.runqtail")
	on, e3 := p.off("runtime.p.runnext")
	if e1 != nil || e2 != nil || e3 != nil {
		st.Missing = append(st.Missing, "run queues: not in the layout")
	}
	periodic := map[PeriodicTimer]int{}
	walked := 0
	for _, pp := range ps {
		if e1 == nil && e2 == nil && e3 == nil {
			h, err1 := p.mem.U32(pp + oh)
			t, err2 := p.mem.U32(pp + ot)
			next, err3 := p.mem.U64(pp + on)
			n := 0
			if err1 == nil && err2 == nil && t-h <= 256 {
				n = int(t - h)
			}
			if err3 == nil && next != 0 {
				n++
			}
			st.LocalRunqs = append(st.LocalRunqs, n)
		}
		timers, n, err := p.timers(pp, maxTimersWalked-walked)
		if err != nil {
			if len(st.TimersPerP) == 0 {
				st.Missing = append(st.Missing, "timers: "+err.Error())
			}
			continue
		}
		st.TimersPerP = append(st.TimersPerP, n)
		for _, t := range timers {
			if walked >= maxTimersWalked {
				break
			}
			walked++
			p.periodicTimer(t, periodic, names)
		}
	}
	for k, n := range periodic {
		k.Count = n
		st.Periodic = append(st.Periodic, k)
	}
	sort.Slice(st.Periodic, func(i, j int) bool {
		a, b := st.Periodic[i], st.Periodic[j]
		if a.Period != b.Period {
			return a.Period < b.Period
		}
		return a.Func < b.Func
	})
	if len(st.Periodic) > maxPeriodic {
		st.Periodic = st.Periodic[:maxPeriodic]
	}
}

// timers returns up to limit timer pointers of P pp's heap and its
// length: Go 1.23
// on keep p.timers.heap ([]timerWhen), older releases p.timers ([]*timer).
func (p *Process) timers(pp uint64, limit int) ([]uint64, int, error) {
	var (
		hdrOff, stride uint64
		err            error
	)
	if o, ok := p.Layout.Off("runtime.p.timers.heap"); ok {
		hdrOff = o
		var ok bool
		stride, ok = p.Layout.Size("runtime.timerWhen")
		if !ok || stride == 0 || stride > 64 {
			return nil, 0, fmt.Errorf("runtime.timerWhen not in the layout")
		}
	} else if o, ok := p.Layout.Off("runtime.p.timers"); ok {
		hdrOff, stride = o, 8
	} else {
		return nil, 0, fmt.Errorf("p.timers not in %s's layout", p.GoVersion)
	}
	var hdr [16]byte
	if err = p.mem.ReadAt(hdr[:], pp+hdrOff); err != nil {
		return nil, 0, err
	}
	arr, n := binary.LittleEndian.Uint64(hdr[:]), binary.LittleEndian.Uint64(hdr[8:])
	if n > maxTimersPerP {
		return nil, 0, fmt.Errorf("a P holds %d timers: not believed", n)
	}
	if n == 0 {
		return nil, 0, nil
	}
	walk := min(n, uint64(max(limit, 0)))
	if walk == 0 {
		return nil, int(n), nil
	}
	if !p.mem.Readable(arr, walk*stride) {
		return nil, int(n), nil
	}
	buf := make([]byte, walk*stride)
	if err := p.mem.ReadAt(buf, arr); err != nil {
		return nil, int(n), nil
	}
	out := make([]uint64, walk)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[uint64(i)*stride:])
	}
	return out, int(n), nil
}

// periodicTimer adds timer t to the periodic ones when it has a period:
// its function is the timer's f, or, for time.AfterFunc's goFunc, the
// function the program gave.
func (p *Process) periodicTimer(t uint64, out map[PeriodicTimer]int, names bool) {
	op, e1 := p.off("runtime.timer.period")
	of, e2 := p.off("runtime.timer.f")
	oa, e3 := p.off("runtime.timer.arg")
	if e1 != nil || e2 != nil || e3 != nil || t == 0 {
		return
	}
	period, err := p.mem.U64(t + op)
	if err != nil || int64(period) <= 0 {
		return
	}
	fn := "?"
	if !names {
		out[PeriodicTimer{Period: time.Duration(period), Func: fn}]++
		return
	}
	if fv, err := p.mem.U64(t + of); err == nil && fv != 0 {
		if pc, err := p.mem.U64(fv); err == nil {
			fn = p.frameAt(pc, false).Func
		}
	}
	if fn == "time.goFunc" {
		// arg is an interface holding the program's func value.
		if data, err := p.mem.U64(t + oa + 8); err == nil && data != 0 {
			if pc, err := p.mem.U64(data); err == nil {
				fn = p.frameAt(pc, false).Func
			}
		}
	}
	out[PeriodicTimer{Period: time.Duration(period), Func: fn}]++
}
