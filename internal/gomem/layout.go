package gomem

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"strings"
)

// Layout is where one Go release keeps the runtime fields the reader
// needs: offsets of fields (nested struct fields flattened with dots:
// "runtime.g.stack.lo"), sizes of structures, and the wait reasons' names
// in the order of the runtime's waitReason constants.
type Layout struct {
	// Go is the release, "go1.22".
	Go string
	// From says where the layout came from: "dwarf" or "table".
	From string
	// Offsets maps "runtime.T.field[.sub]" to the field's byte offset in T.
	Offsets map[string]uint64
	// Sizes maps "runtime.T" to the size of T in bytes.
	Sizes map[string]uint64
	// WaitReasons names each waitReason value; nil when unknown.
	WaitReasons []string
}

// Off returns the offset of field path ("runtime.g.stack.lo").
func (l *Layout) Off(path string) (uint64, bool) {
	v, ok := l.Offsets[path]
	return v, ok
}

// Size returns the size of type name ("runtime.g").
func (l *Layout) Size(name string) (uint64, bool) {
	v, ok := l.Sizes[name]
	return v, ok
}

// wanted lists, per runtime type, the fields the reader uses. A field
// absent in a release (parentGoid before 1.21, p.timers' shape before and
// after 1.23) is simply not in that release's layout; decoders say what
// they could not read.
var wanted = map[string][]string{
	"runtime.g": {"stack.lo", "stack.hi", "sched.sp", "sched.pc", "sched.bp", "atomicstatus", "goid",
		"waitsince", "waitreason", "gopc", "startpc", "m", "lockedm", "parentGoid", "syscallsp", "syscallpc"},
	"runtime.p": {"id", "status", "schedtick", "runqhead", "runqtail", "runnext", "goidcache", "goidcacheend",
		"timers", "numTimers", "timers.heap", "timers.len"},
	"runtime.schedt": {"goidgen", "nmidle", "nmidlelocked", "mnext", "maxmcount", "nmsys", "nmfreed", "ngsys",
		"npidle", "nmspinning", "runqsize", "runq.size", "gFree.n", "gFree.stack", "gFree.noStack"},
	"runtime.mstats": {"heapStats", "last_gc_unix", "pause_total_ns", "numgc", "numforcedgc",
		"gc_cpu_fraction", "last_gc_nanotime", "buckhash_sys", "pause_ns", "pause_end"},
	"runtime.consistentHeapStats": {"stats", "gen"},
	"runtime.heapStatsDelta": {"committed", "released", "inHeap", "inStacks", "tinyAllocCount", "largeAlloc",
		"largeAllocCount", "smallAllocCount", "largeFree", "largeFreeCount", "smallFreeCount"},
	"runtime.gcControllerState": {"gcPercent", "memoryLimit", "heapMinimum", "heapMarked", "heapLive",
		"heapScan", "lastStackScan", "globalsScan", "gcPercentHeapGoal", "memoryLimitHeapGoal", "lastHeapGoal",
		"assistTime", "dedicatedMarkTime", "fractionalMarkTime", "idleMarkTime"},
	"runtime.workType":         {"cpuStats", "cycles", "full", "tSweepTerm", "tMark", "tMarkTerm", "tEnd"},
	"runtime.cpuStats":         {"GCAssistTime", "GCDedicatedTime", "GCIdleTime", "GCPauseTime", "GCTotalTime", "UserTime", "TotalTime", "IdleTime"},
	"runtime.timer":            {"when", "period", "f", "arg", "pp"},
	"runtime.timerWhen":        {"timer", "when"},
	"runtime.bucket":           {"next", "allnext", "typ", "hash", "size", "nstk"},
	"runtime.memRecord":        {"active", "future"},
	"runtime.memRecordCycle":   {"allocs", "frees", "alloc_bytes", "free_bytes"},
	"runtime.mProfCycleHolder": {"value"},
	"runtime.funcval":          {"fn"},
}

// ErrNoDWARF reports a binary without debug information.
var ErrNoDWARF = errors.New("no DWARF")

// maxDWARFEntries bounds the walk of a crafted or huge debug section.
const maxDWARFEntries = 20_000_000

// layoutFromDWARF reads the wanted structures' layout from d. It walks the
// type entries once and resolves only the runtime types wanted.
func layoutFromDWARF(d *dwarf.Data) (*Layout, error) {
	l := &Layout{From: "dwarf", Offsets: map[string]uint64{}, Sizes: map[string]uint64{}}
	r := d.Reader()
	found := 0
	for n := 0; n < maxDWARFEntries; n++ {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("read DWARF: %w", err)
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit {
			name, _ := e.Val(dwarf.AttrName).(string)
			if name != "runtime" {
				r.SkipChildren()
			}
			continue
		}
		if e.Tag != dwarf.TagStructType {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		fields, ok := wanted[name]
		if !ok {
			r.SkipChildren()
			continue
		}
		if _, done := l.Sizes[name]; done {
			r.SkipChildren()
			continue
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			return nil, fmt.Errorf("read DWARF type %s: %w", name, err)
		}
		r.SkipChildren()
		st, ok := t.(*dwarf.StructType)
		if !ok {
			continue
		}
		l.Sizes[name] = uint64(st.ByteSize)
		for _, f := range fields {
			if off, ok := fieldOffset(st, f); ok {
				l.Offsets[name+"."+f] = off
			}
		}
		found++
		if found == len(wanted) {
			break
		}
	}
	if _, ok := l.Sizes["runtime.g"]; !ok {
		return nil, fmt.Errorf("%w: runtime.g not described", ErrNoDWARF)
	}
	return l, nil
}

// fieldOffset finds dotted path in st, through nested structs (and the
// single-field atomic wrappers, which are structs too).
func fieldOffset(st *dwarf.StructType, path string) (uint64, bool) {
	head, rest, nested := strings.Cut(path, ".")
	for _, f := range st.Field {
		if f.Name != head {
			continue
		}
		if !nested {
			return uint64(f.ByteOffset), true
		}
		inner, ok := dwarfStruct(f.Type)
		if !ok {
			return 0, false
		}
		off, ok := fieldOffset(inner, rest)
		return uint64(f.ByteOffset) + off, ok
	}
	return 0, false
}

func dwarfStruct(t dwarf.Type) (*dwarf.StructType, bool) {
	for range 8 {
		switch tt := t.(type) {
		case *dwarf.StructType:
			return tt, true
		case *dwarf.TypedefType:
			t = tt.Type
		default:
			return nil, false
		}
	}
	return nil, false
}
