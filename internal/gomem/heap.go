package gomem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Bounds of a heap profile walk. The runtime records at most 1024 frames
// per bucket (maxProfStackDepth, 32 before Go 1.23); a list longer than
// maxBuckets is a cycle or a hostile list.
const (
	maxBucketStack = 1024
	maxBuckets     = 1 << 20
	memProfile     = 1 // runtime.bucketType of memory profile buckets
)

// ErrMemProfilingOff reports a binary whose linker turned memory profiling
// off: nothing in it references the heap profile, so the runtime keeps no
// book to read.
var ErrMemProfilingOff = errors.New("memory profiling is off in this binary: the linker disabled it " +
	"because nothing in the program references the heap profile (net/http/pprof or runtime.MemProfile would)")

// HeapRecord is one allocation site of the heap profile: its stack (as
// run-time return addresses) and the sampled counts as of the last
// completed GC cycle, as runtime.MemProfile reports them (not scaled).
type HeapRecord struct {
	Stack                    []uint64
	AllocObjects, AllocBytes int64
	FreeObjects, FreeBytes   int64
}

// InUseObjects is the objects allocated at the site and not yet freed.
func (r HeapRecord) InUseObjects() int64 { return r.AllocObjects - r.FreeObjects }

// InUseBytes is the bytes allocated at the site and not yet freed.
func (r HeapRecord) InUseBytes() int64 { return r.AllocBytes - r.FreeBytes }

// HeapProfile is the runtime's heap profile read from memory.
type HeapProfile struct {
	Time time.Time
	// Rate is runtime.MemProfileRate: one allocation sampled per Rate
	// bytes on average.
	Rate    int64
	Records []HeapRecord
	// GCCycles is the GC cycle count when the profile was read (the
	// profile is as of the last completed cycle).
	GCCycles uint32
	Notes    []string
}

// bucketFields are the offsets a bucket walk needs.
type bucketFields struct {
	next, allnext, typ, nstk, size, hdr  uint64
	active, future, cycle, rec           uint64
	allocs, frees, allocBytes, freeBytes uint64
	// bytesByCount: the release keeps no byte counts (Go 1.27 on): a
	// bucket's allocations are all of its size, so bytes are counts times
	// the bucket's object size.
	bytesByCount bool
}

func (p *Process) bucketFields() (bucketFields, error) {
	var f bucketFields
	var err error
	get := func(dst *uint64, path string) {
		if err == nil {
			*dst, err = p.off(path)
		}
	}
	get(&f.next, "runtime.bucket.next")
	get(&f.allnext, "runtime.bucket.allnext")
	get(&f.typ, "runtime.bucket.typ")
	get(&f.nstk, "runtime.bucket.nstk")
	get(&f.active, "runtime.memRecord.active")
	get(&f.future, "runtime.memRecord.future")
	get(&f.size, "runtime.bucket.size")
	get(&f.allocs, "runtime.memRecordCycle.allocs")
	get(&f.frees, "runtime.memRecordCycle.frees")
	if err != nil {
		return f, err
	}
	ab, okA := p.Layout.Off("runtime.memRecordCycle.alloc_bytes")
	fb, okF := p.Layout.Off("runtime.memRecordCycle.free_bytes")
	if okA && okF {
		f.allocBytes, f.freeBytes = ab, fb
	} else {
		f.bytesByCount = true
	}
	var ok1, ok2, ok3 bool
	f.hdr, ok1 = p.Layout.Size("runtime.bucket")
	f.cycle, ok2 = p.Layout.Size("runtime.memRecordCycle")
	f.rec, ok3 = p.Layout.Size("runtime.memRecord")
	if !ok1 || !ok2 || !ok3 || f.hdr > 256 || f.cycle > 64 || f.rec > 512 {
		return f, fmt.Errorf("heap profile buckets: sizes not in %s's layout", p.GoVersion)
	}
	return f, nil
}

// MemProfilingOff reports whether the linker turned memory profiling off
// in the binary (runtime.disableMemoryProfiling).
func (p *Process) MemProfilingOff() (bool, error) {
	a, err := p.addr(symDisableMemProf)
	if err != nil {
		return false, err
	}
	var b [1]byte
	if err := p.mem.ReadAt(b[:], a); err != nil {
		return false, fmt.Errorf("read runtime.disableMemoryProfiling: %w", err)
	}
	return b[0] != 0, nil
}

// HeapProfile reads the heap profile from runtime.mbuckets: every bucket,
// its active cycle plus the cycle runtime.MemProfile would flush into it
// first (so the result equals what the program's own /debug/pprof/heap
// would report at this instant), or, where no cycle has completed, every
// cycle (as MemProfile does before the first GC). It fails with
// ErrMemProfilingOff where the linker disabled memory profiling.
func (p *Process) HeapProfile() (*HeapProfile, error) {
	if off, err := p.MemProfilingOff(); err == nil && off {
		return nil, ErrMemProfilingOff
	}
	f, err := p.bucketFields()
	if err != nil {
		return nil, err
	}
	h := &HeapProfile{Time: time.Now()}
	if a, err := p.addr(symMemProfileRate); err == nil {
		if v, err := p.mem.U64(a); err == nil && int64(v) >= 0 {
			h.Rate = int64(v)
		}
	}
	if h.Rate == 0 {
		h.Notes = append(h.Notes, "runtime.MemProfileRate is 0: the program turned heap sampling off")
	}
	var cycle uint32
	if a, err := p.addr(symMProfCycle); err == nil {
		if v, err := p.mem.U32(a); err == nil {
			cycle = v >> 1 // the low bit says whether the cycle was flushed
		}
	}
	idx := uint64(cycle % 3)
	h.GCCycles = p.numGC()
	p.mem.setBudget(256 << 20)
	defer p.mem.setBudget(0)
	head, err := p.addr(symMbuckets)
	if err != nil {
		return nil, err
	}
	b, err := p.mem.U64(head)
	if err != nil {
		return nil, fmt.Errorf("read runtime.mbuckets: %w", err)
	}
	seen := map[uint64]bool{}
	type raw struct {
		stack   []uint64
		active  [4]int64
		futures [3][4]int64
	}
	var raws []raw
	allZero := true
	buf := make([]byte, f.hdr+32*8+f.rec)
	for b != 0 {
		if len(raws) >= maxBuckets || seen[b] {
			h.Notes = append(h.Notes, "the bucket list loops or is too long: read stopped")
			break
		}
		seen[b] = true
		if err := p.mem.ReadAt(buf[:f.hdr], b); err != nil {
			return nil, fmt.Errorf("read heap profile bucket at %#x: %w", b, err)
		}
		typ := binary.LittleEndian.Uint64(buf[f.typ:]) & 0xffffffff
		nstk := binary.LittleEndian.Uint64(buf[f.nstk:])
		next := binary.LittleEndian.Uint64(buf[f.allnext:])
		if typ != memProfile || nstk > maxBucketStack {
			return nil, fmt.Errorf("heap profile bucket at %#x: type %d with %d frames: not a memory profile bucket", b, typ, nstk)
		}
		body := f.hdr + nstk*8 + f.rec
		if uint64(len(buf)) < body {
			nb := make([]byte, body)
			copy(nb, buf[:f.hdr])
			buf = nb
		}
		if err := p.mem.ReadAt(buf[f.hdr:body], b+f.hdr); err != nil {
			return nil, fmt.Errorf("read heap profile bucket at %#x: %w", b, err)
		}
		r := raw{stack: make([]uint64, nstk)}
		for i := range r.stack {
			r.stack[i] = binary.LittleEndian.Uint64(buf[f.hdr+uint64(i)*8:])
		}
		mr := buf[f.hdr+nstk*8 : body]
		objSize := int64(binary.LittleEndian.Uint64(buf[f.size:]))
		cyc := func(at uint64) [4]int64 {
			c := mr[at:]
			allocs, frees := int64(binary.LittleEndian.Uint64(c[f.allocs:])), int64(binary.LittleEndian.Uint64(c[f.frees:]))
			if f.bytesByCount {
				return [4]int64{allocs, frees, allocs * objSize, frees * objSize}
			}
			return [4]int64{allocs, frees, int64(binary.LittleEndian.Uint64(c[f.allocBytes:])), int64(binary.LittleEndian.Uint64(c[f.freeBytes:]))}
		}
		r.active = cyc(f.active)
		for i := range r.futures {
			r.futures[i] = cyc(f.future + uint64(i)*f.cycle)
		}
		r.active = addCycle(r.active, r.futures[idx])
		if r.active != [4]int64{} {
			allZero = false
		}
		raws = append(raws, r)
		b = next
	}
	for _, r := range raws {
		c := r.active
		if allZero {
			for i, fu := range r.futures {
				if uint64(i) != idx {
					c = addCycle(c, fu)
				}
			}
		}
		if c[0] < 0 || c[1] < 0 || c[2] < 0 || c[3] < 0 {
			continue
		}
		h.Records = append(h.Records, HeapRecord{Stack: r.stack, AllocObjects: c[0], FreeObjects: c[1], AllocBytes: c[2], FreeBytes: c[3]})
	}
	return h, nil
}

func addCycle(a, b [4]int64) [4]int64 {
	for i := range a {
		a[i] += b[i]
	}
	return a
}

// numGC reads memstats.numgc (0 when it cannot).
func (p *Process) numGC() uint32 {
	a, err := p.addr(symMemstats)
	if err != nil {
		return 0
	}
	o, err := p.off("runtime.mstats.numgc")
	if err != nil {
		return 0
	}
	v, _ := p.mem.U32(a + o)
	return v
}

// scaleHeapSample turns sampled counts into estimates of the true counts:
// an allocation of size s is sampled with probability 1-exp(-s/rate), so
// each sample stands for 1/(1-exp(-avg/rate)) allocations (the estimate
// pprof's heap profile reports).
func scaleHeapSample(count, size, rate int64) (int64, int64) {
	if count == 0 || size == 0 {
		return 0, 0
	}
	if rate <= 1 {
		return count, size
	}
	avg := float64(size) / float64(count)
	scale := 1 / (1 - math.Exp(-avg/float64(rate)))
	return int64(float64(count) * scale), int64(float64(size) * scale)
}

// Pprof renders the heap profile as pprof does for /debug/pprof/heap:
// sample types alloc_objects, alloc_space, inuse_objects and inuse_space
// (scaled estimates), the sampling rate as period, the stacks without the
// runtime's allocator frames on top.
func (p *Process) Pprof(h *HeapProfile) *profile.Profile {
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"},
		},
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            h.Rate,
		TimeNanos:         h.Time.UnixNano(),
		DefaultSampleType: "inuse_space",
	}
	m := &profile.Mapping{ID: 1, File: p.pfs.PID(p.PID, "exe"), HasFunctions: true, HasFilenames: true,
		HasLineNumbers: true, HasInlineFrames: true}
	prof.Mapping = []*profile.Mapping{m}
	locs := map[uint64]*profile.Location{}
	funcs := map[string]*profile.Function{}
	loc := func(pc uint64) *profile.Location {
		if l, ok := locs[pc]; ok {
			return l
		}
		l := &profile.Location{ID: uint64(len(prof.Location) + 1), Address: pc, Mapping: m}
		for _, fr := range p.symbolize([]uint64{pc}) {
			if fr.Func == "runtime.goexit" || isWrapper(fr) {
				continue // pprof leaves them out of every stack
			}
			fn, ok := funcs[fr.Func+"\x00"+fr.File]
			if !ok {
				fn = &profile.Function{ID: uint64(len(prof.Function) + 1), Name: fr.Func, SystemName: fr.Func, Filename: fr.File}
				funcs[fr.Func+"\x00"+fr.File] = fn
				prof.Function = append(prof.Function, fn)
			}
			l.Line = append(l.Line, profile.Line{Function: fn, Line: int64(fr.Line)})
		}
		locs[pc] = l
		prof.Location = append(prof.Location, l)
		return l
	}
	for _, r := range h.Records {
		stk := p.logicalStack(p.hideRuntime(r.Stack))
		s := &profile.Sample{}
		for _, pc := range stk {
			if l := loc(pc); len(l.Line) > 0 {
				s.Location = append(s.Location, l)
			}
		}
		ao, ab := scaleHeapSample(r.AllocObjects, r.AllocBytes, h.Rate)
		io, ib := scaleHeapSample(r.InUseObjects(), r.InUseBytes(), h.Rate)
		s.Value = []int64{ao, ab, io, ib}
		if bytes := r.AllocBytes; r.AllocObjects > 0 {
			s.NumLabel = map[string][]int64{"bytes": {bytes / r.AllocObjects}}
			s.NumUnit = map[string][]string{"bytes": {"bytes"}}
		}
		prof.Sample = append(prof.Sample, s)
	}
	return prof
}

// hideRuntime drops the runtime's frames on top of an allocation stack
// (the allocator itself), keeping them where nothing else is left.
func (p *Process) hideRuntime(stk []uint64) []uint64 {
	for i, pc := range stk {
		fr := p.frameAt(pc, true)
		if strings.HasPrefix(fr.Func, "runtime.") || strings.HasPrefix(fr.Func, "internal/runtime/") {
			continue
		}
		return stk[i:]
	}
	return stk
}

// isWrapper reports a compiler-generated wrapper, which the runtime's
// CallersFrames (and so pprof) leaves out of stacks: the closures of go
// statements with arguments (gowrapN) and other autogenerated code.
func isWrapper(fr Frame) bool {
	if fr.File == "<autogenerated>" {
		return true
	}
	i := strings.LastIndex(fr.Func, ".gowrap")
	if i < 0 {
		return false
	}
	for _, c := range fr.Func[i+len(".gowrap"):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(fr.Func) > i+len(".gowrap")
}

// Site is an allocation site of the heap profile: the innermost frame
// outside the runtime, the stack above it, and the scaled estimates of
// what was allocated there and is still in use (as pprof reports them).
type Site struct {
	Frame
	// Stack is the site's stack, innermost first, at most 8 frames.
	Stack        []Frame `json:"stack"`
	AllocObjects int64   `json:"alloc_objects"`
	AllocBytes   int64   `json:"alloc_bytes"`
	InUseObjects int64   `json:"inuse_objects"`
	InUseBytes   int64   `json:"inuse_bytes"`
}

// Sites sums the heap profile by allocation site, largest in-use bytes
// first.
func (p *Process) Sites(h *HeapProfile) []Site {
	idx := map[Frame]int{}
	var out []Site
	for _, r := range h.Records {
		frames := p.symbolize(p.logicalStack(p.hideRuntime(r.Stack)))
		var kept []Frame
		for _, f := range frames {
			if f.Func != "runtime.goexit" && !isWrapper(f) {
				kept = append(kept, f)
			}
		}
		// A stack all in the runtime (its own allocations) is named by
		// the first frame past the allocator.
		for len(kept) > 1 && isAllocator(kept[0].Func) {
			kept = kept[1:]
		}
		if len(kept) == 0 {
			continue
		}
		ao, ab := scaleHeapSample(r.AllocObjects, r.AllocBytes, h.Rate)
		io, ib := scaleHeapSample(r.InUseObjects(), r.InUseBytes(), h.Rate)
		i, ok := idx[kept[0]]
		if !ok {
			i = len(out)
			idx[kept[0]] = i
			out = append(out, Site{Frame: kept[0], Stack: kept[:min(len(kept), 8)]})
		}
		s := &out[i]
		s.AllocObjects += ao
		s.AllocBytes += ab
		s.InUseObjects += io
		s.InUseBytes += ib
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].InUseBytes != out[j].InUseBytes {
			return out[i].InUseBytes > out[j].InUseBytes
		}
		return out[i].AllocBytes > out[j].AllocBytes
	})
	return out
}

// isAllocator reports the runtime's allocation entry points, which top
// every heap profile stack.
func isAllocator(fn string) bool {
	switch fn {
	case "runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makechan",
		"runtime.newarray", "runtime.makemap", "runtime.makemap_small", "runtime.rawstring", "runtime.rawbyteslice",
		"runtime.rawruneslice", "runtime.mapassign", "runtime.convT", "runtime.convTstring", "runtime.convTslice":
		return true
	}
	return strings.HasPrefix(fn, "runtime.mallocgc")
}

// logicalStack drops the pcs of a heap profile stack that add no frame:
// the runtime records allocation stacks with a pc for each inlined call as
// well as for the physical frame that holds them (its frame-pointer
// unwinder expands inlining for the frames it skips), so a pc whose
// inlined frames are the tail of the frames of the pc before it repeats
// them. pprof's profile builder merges them the same way. A pc with as
// many frames as the one before is always kept (recursion); a recursive
// call made from an inlined callee, with the outer call made directly,
// would lose one frame.
func (p *Process) logicalStack(stk []uint64) []uint64 {
	bin := p.binary()
	if len(stk) < 2 || bin == nil {
		return stk
	}
	out := make([]uint64, 0, len(stk))
	var prev []Frame
	for _, pc := range stk {
		fr := p.symbolize([]uint64{pc})
		if len(fr) < len(prev) && sameFuncs(fr, prev[len(prev)-len(fr):]) {
			continue
		}
		out = append(out, pc)
		prev = fr
	}
	return out
}

func sameFuncs(a, b []Frame) bool {
	for i := range a {
		if a[i].Func != b[i].Func {
			return false
		}
	}
	return true
}
