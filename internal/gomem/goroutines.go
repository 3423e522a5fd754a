package gomem

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Limits of one census: the runtime allows any number of goroutines, but a
// count read from memory beyond these is a torn or hostile value.
const (
	maxGoroutines = 10_000_000
	maxFrames     = 64
	stackWindow   = 1024 // bytes of a stack read at once while unwinding
	// defaultUnwind is how many goroutines' stacks a census unwinds by
	// default; the rest are counted by start function and creation site.
	defaultUnwind = 4096
)

// The runtime's goroutine statuses (runtime2.go), stable from Go 1.20 on;
// 10 and 11 are Go 1.26's leaked and deadextra.
const (
	gIdle      = 0
	gRunnable  = 1
	gRunning   = 2
	gSyscall   = 3
	gWaiting   = 4
	gDead      = 6
	gCopystack = 8
	gPreempted = 9
	gLeaked    = 10
	gDeadExtra = 11
	gScan      = 0x1000
)

// Frame is one function of a stack.
type Frame struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

func (f Frame) String() string {
	if f.File == "" {
		return f.Func
	}
	return fmt.Sprintf("%s (%s:%d)", f.Func, f.File, f.Line)
}

// Census is the goroutines of a process at one instant.
type Census struct {
	Time time.Time `json:"time"`
	// Total counts the live goroutines, the runtime's own included;
	// System counts those (started in package runtime, other than main).
	Total  int `json:"total"`
	System int `json:"system"`
	// ByState counts live goroutines by state: "running", "runnable",
	// "syscall", or the wait reason of a waiting one ("chan receive", "IO
	// wait", ...).
	ByState map[string]int `json:"by_state"`
	// StackBytes is the stack memory the live goroutines hold.
	StackBytes uint64 `json:"stack_bytes"`
	// Created is how many goroutines the program has created since it
	// started, when CreatedKnown.
	Created      uint64 `json:"created"`
	CreatedKnown bool   `json:"created_known"`
	// Groups gathers goroutines by start function, creation site and
	// state, largest first.
	Groups []Group `json:"groups"`
	// Stacks gathers the unwound goroutines by identical stack, largest
	// first; Unwound says how many were unwound (running goroutines are
	// not: their saved registers are stale).
	Stacks  []StackGroup `json:"stacks"`
	Unwound int          `json:"unwound"`
	// Took is how long the census took gosleuth (wall time).
	Took time.Duration `json:"took_ns"`
	// Notes say what could not be read.
	Notes []string `json:"notes,omitempty"`
}

// Group is goroutines with one start function, creation site and state.
type Group struct {
	Start     Frame  `json:"start"`
	CreatedBy Frame  `json:"created_by"`
	State     string `json:"state"`
	Count     int    `json:"count"`
	System    bool   `json:"system,omitempty"`
	// StackBytes is the stack memory the group holds.
	StackBytes uint64 `json:"stack_bytes"`
	// MaxWait is the longest a goroutine of the group has been blocked,
	// where the runtime recorded when it blocked (it does so during GC),
	// zero otherwise.
	MaxWait time.Duration `json:"max_wait_ns"`
	// Unwound counts the group's goroutines whose stacks are in
	// Census.Stacks.
	Unwound int `json:"unwound"`
}

// StackGroup is unwound goroutines with identical stacks and state.
type StackGroup struct {
	Count  int     `json:"count"`
	State  string  `json:"state"`
	System bool    `json:"system,omitempty"`
	Frames []Frame `json:"frames"`
}

// CensusOptions tune a census.
type CensusOptions struct {
	// Unwind bounds how many goroutines' stacks are unwound (0: a default
	// of 4,096; negative: none). Beyond it goroutines are still counted
	// and grouped by start function and creation site.
	Unwind int
	// Counts takes counts only: goroutines by state, stack bytes, created,
	// and the runtime's own goroutines from sched.ngsys; no groups, no
	// names, no stacks, and no need of the executable's function table.
	Counts bool
}

// gFields are the offsets of the g fields a census reads.
type gFields struct {
	stackLo, stackHi, sp, pc, status, goid, waitsince, waitreason, gopc, startpc, syscallsp, syscallpc uint64
	size                                                                                               uint64 // bytes of each g to read
}

func (p *Process) gFields() (gFields, error) {
	var f gFields
	for _, x := range []struct {
		dst  *uint64
		name string
	}{
		{&f.stackLo, "stack.lo"}, {&f.stackHi, "stack.hi"}, {&f.sp, "sched.sp"}, {&f.pc, "sched.pc"},
		{&f.status, "atomicstatus"}, {&f.goid, "goid"}, {&f.waitsince, "waitsince"},
		{&f.waitreason, "waitreason"}, {&f.gopc, "gopc"}, {&f.startpc, "startpc"},
		{&f.syscallsp, "syscallsp"}, {&f.syscallpc, "syscallpc"},
	} {
		o, err := p.off("runtime.g." + x.name)
		if err != nil {
			return f, err
		}
		*x.dst = o
		f.size = max(f.size, o+8)
	}
	if gs, ok := p.Layout.Size("runtime.g"); !ok || f.size > gs {
		return f, fmt.Errorf("runtime.g of %d bytes: fields beyond it", gs)
	}
	return f, nil
}

// allGs reads the pointers of runtime.allgs, bounded by allglen and by
// maxGoroutines. The runtime grows allgs by copying it to a new array, so
// the header is read again after the array: a moved array is read once
// more.
func (p *Process) allGs() ([]uint64, error) {
	lenAddr, err := p.addr(symAllglen)
	if err != nil {
		return nil, err
	}
	sAddr, err := p.addr(symAllgs)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		n, err := p.mem.U64(lenAddr)
		if err != nil {
			return nil, fmt.Errorf("read runtime.allglen: %w", err)
		}
		var hdr [24]byte
		if err := p.mem.ReadAt(hdr[:], sAddr); err != nil {
			return nil, fmt.Errorf("read runtime.allgs: %w", err)
		}
		arr, l := binary.LittleEndian.Uint64(hdr[:]), binary.LittleEndian.Uint64(hdr[8:])
		n = min(n, l)
		if n > maxGoroutines {
			return nil, fmt.Errorf("runtime.allgs holds %d goroutines: more than %d, not believed", n, maxGoroutines)
		}
		if n == 0 {
			return nil, nil
		}
		if !p.mem.Readable(arr, n*8) {
			return nil, fmt.Errorf("runtime.allgs array of %d goroutines at %#x: %w", n, arr, ErrBadAddress)
		}
		buf := make([]byte, n*8)
		const chunk = 1 << 20
		for off := uint64(0); off < uint64(len(buf)); off += chunk {
			end := min(off+chunk, uint64(len(buf)))
			if err := p.mem.ReadAt(buf[off:end], arr+off); err != nil {
				return nil, fmt.Errorf("read runtime.allgs array: %w", err)
			}
		}
		if err := p.mem.ReadAt(hdr[:8], sAddr); err == nil && binary.LittleEndian.Uint64(hdr[:]) != arr && try == 0 {
			continue
		}
		gs := make([]uint64, n)
		for i := range gs {
			gs[i] = binary.LittleEndian.Uint64(buf[i*8:])
		}
		return gs, nil
	}
}

type gRec struct {
	status               uint32
	reason               uint8
	lo, hi, sp, pc       uint64
	syscallsp, syscallpc uint64
	gopc, startpc, since uint64
	group                int
}

// Census counts and groups the process's goroutines without stopping it.
// Its memory is bounded by the groups (at most maxGroups) and the
// goroutines kept for unwinding, not by the goroutines counted.
func (p *Process) Census(opts CensusOptions) (*Census, error) {
	c := &Census{Time: time.Now(), ByState: map[string]int{}}
	f, err := p.gFields()
	if err != nil {
		return nil, err
	}
	p.mem.setBudget(censusBudget)
	defer p.mem.setBudget(0)
	ptrs, err := p.allGs()
	if err != nil {
		return nil, err
	}
	unwind := opts.Unwind
	if unwind == 0 {
		unwind = defaultUnwind
	}
	if opts.Counts {
		unwind = -1
	}
	g := p.newGrouper(c, monotonicNow(), max(unwind, 0))
	g.counts = opts.Counts
	unreadable, err := p.readGs(ptrs, f.size, func(b []byte) {
		u64 := func(o uint64) uint64 { return binary.LittleEndian.Uint64(b[o:]) }
		r := gRec{
			status: binary.LittleEndian.Uint32(b[f.status:]) &^ gScan,
			reason: b[f.waitreason],
			lo:     u64(f.stackLo), hi: u64(f.stackHi), sp: u64(f.sp), pc: u64(f.pc),
			syscallsp: u64(f.syscallsp), syscallpc: u64(f.syscallpc),
			gopc: u64(f.gopc), startpc: u64(f.startpc), since: u64(f.waitsince),
		}
		if r.status == gDead || r.status == gDeadExtra || r.status == gIdle {
			return
		}
		g.add(r)
	})
	if err != nil {
		c.Notes = append(c.Notes, fmt.Sprintf("census stopped early: %v", err))
	}
	g.finish()
	if unreadable > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d goroutine records not readable (freed or moved while read)", unreadable))
	}
	if g.overflow > 0 {
		c.Notes = append(c.Notes, fmt.Sprintf("%d goroutines beyond %d groups counted in the last group", g.overflow, maxGroups))
	}
	if opts.Counts {
		if n, err := p.systemGoroutines(); err == nil {
			c.System = min(n, c.Total)
		} else {
			c.Notes = append(c.Notes, "the runtime's own goroutines: "+err.Error())
		}
	}
	if created, err := p.created(); err == nil {
		c.Created, c.CreatedKnown = created, true
	} else {
		c.Notes = append(c.Notes, "goroutines created: "+err.Error())
	}
	if unwind > 0 {
		p.unwindAll(c, g.kept, unwind)
	}
	sort.SliceStable(c.Groups, func(i, j int) bool { return c.Groups[i].Count > c.Groups[j].Count })
	c.Took = time.Since(c.Time)
	return c, nil
}

// Bounds of a census's own memory and reads: a hostile allgs can repeat
// one readable record millions of times or make every record a group of
// its own.
const (
	censusBudget = 2 << 30 // bytes read
	maxGroups    = 10_000
	minKeptGroup = 16 // goroutines of each group kept for unwinding
)

// groupKey is a group's identity: start function, creation site and
// state (a waiting goroutine's wait reason; 0 for other states).
type groupKey struct {
	start, gopc uint64
	status      uint32
	reason      uint8
}

// grouper folds goroutine records into a census's groups as they are
// read, keeping a bounded set of them for unwinding: every record while
// fewer than the unwind bound are kept, and the first minKeptGroup of each
// group after.
type grouper struct {
	p        *Process
	c        *Census
	now      int64
	idx      map[groupKey]int
	kept     []gRec
	keptOf   []int
	states   map[uint32]int // by status<<8 | reason
	limit    int
	overflow int
	counts   bool // no groups (CensusOptions.Counts)
}

func (p *Process) newGrouper(c *Census, now int64, limit int) *grouper {
	return &grouper{p: p, c: c, now: now, idx: map[groupKey]int{},
		states: map[uint32]int{}, limit: limit}
}

func (g *grouper) frame(pc uint64, ret bool) Frame {
	return g.p.cachedFrame(pc, ret)
}

// maxFrameCache bounds the frames a Process keeps between reads.
const maxFrameCache = 1 << 16

// cachedFrame is frameAt, kept between reads: a process's start functions
// and go statements are few and stay the same.
func (p *Process) cachedFrame(pc uint64, ret bool) Frame {
	k := pc << 1
	if ret {
		k |= 1
	}
	if fr, ok := p.frames[k]; ok {
		return fr
	}
	fr := p.frameAt(pc, ret)
	if p.frames == nil || len(p.frames) >= maxFrameCache {
		p.frames = map[uint64]Frame{}
	}
	p.frames[k] = fr
	return fr
}

// cachedStart is startFrame, kept between reads.
func (p *Process) cachedStart(pc uint64) Frame {
	if fr, ok := p.starts[pc]; ok {
		return fr
	}
	fr := p.startFrame(pc, p.cachedFrame)
	if p.starts == nil || len(p.starts) >= maxFrameCache {
		p.starts = map[uint64]Frame{}
	}
	p.starts[pc] = fr
	return fr
}

func (g *grouper) add(r gRec) {
	c := g.c
	if r.status != gWaiting {
		r.reason = 0
	}
	c.Total++
	g.states[r.status<<8|uint32(r.reason)]++
	stack := uint64(0)
	if r.hi > r.lo && r.hi-r.lo <= 1<<30 {
		stack = r.hi - r.lo
	}
	c.StackBytes += stack
	if g.counts {
		return
	}
	k := groupKey{r.startpc, r.gopc, r.status, r.reason}
	gi, ok := g.idx[k]
	if !ok {
		if len(c.Groups) >= maxGroups {
			gi = len(c.Groups) - 1
			g.overflow++
		} else {
			start := g.p.cachedStart(r.startpc)
			gi = len(c.Groups)
			g.idx[k] = gi
			c.Groups = append(c.Groups, Group{Start: start, CreatedBy: g.frame(r.gopc, true),
				State: g.p.stateName(r.status, r.reason), System: isSystem(start.Func)})
			g.keptOf = append(g.keptOf, 0)
		}
	}
	r.group = gi
	grp := &c.Groups[gi]
	grp.Count++
	if grp.System {
		c.System++
	}
	grp.StackBytes += stack
	if r.status == gWaiting && r.since != 0 && g.now > int64(r.since) {
		grp.MaxWait = max(grp.MaxWait, time.Duration(g.now-int64(r.since)))
	}
	if g.limit > 0 && (len(g.kept) < g.limit || g.keptOf[gi] < minKeptGroup) {
		g.kept = append(g.kept, r)
		g.keptOf[gi]++
	}
}

// finish names the states counted.
func (g *grouper) finish() {
	for k, n := range g.states {
		name := g.p.stateName(k>>8, uint8(k))
		if len(g.c.ByState) >= 256 {
			name = "other"
		}
		g.c.ByState[name] += n
	}
}

// startFrame names the function a goroutine starts in. A go statement
// with arguments starts in a compiler-generated wrapper (main.main.gowrap1)
// that calls the function written: the wrapper's code is read for it,
// either inlined into the wrapper (the function table's inline tree) or
// called by its first direct CALL.
func (p *Process) startFrame(pc uint64, frame func(uint64, bool) Frame) Frame {
	bin := p.binary()
	fr := frame(pc, false)
	if !isWrapper(fr) || bin == nil || pc < p.bias {
		return fr
	}
	v := pc - p.bias
	code, ok := bin.Read(v, 256)
	if !ok {
		return fr
	}
	for i := 0; i < len(code); i++ {
		if fs := bin.Frames(v + uint64(i)); len(fs) > 1 {
			inner := fs[0]
			return Frame{Func: inner.Func, File: inner.File, Line: inner.Line}
		} else if len(fs) == 1 && fs[0].Func != fr.Func {
			break // past the wrapper's end
		}
		if code[i] == 0xe8 && i+5 <= len(code) {
			target := v + uint64(i) + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(code[i+1:]))))
			if fs := bin.Frames(target); len(fs) > 0 && !strings.HasPrefix(fs[0].Func, "runtime.") {
				return Frame{Func: fs[0].Func, File: fs[0].File, Line: fs[0].Line}
			}
		}
	}
	return fr
}

// isSystem says whether a goroutine started at function fn is the
// runtime's own (as the runtime's isSystemGoroutine judges by start
// function; the finalizer goroutine counts as system).
func isSystem(fn string) bool {
	return strings.HasPrefix(fn, "runtime.") && fn != "runtime.main"
}

// stateName names a status, or a waiting goroutine's wait reason.
func (p *Process) stateName(status uint32, reason uint8) string {
	switch status {
	case gRunnable:
		return "runnable"
	case gRunning:
		return "running"
	case gSyscall:
		return "syscall"
	case gWaiting, gPreempted, gCopystack:
		if status == gPreempted {
			return "preempted"
		}
		if status == gCopystack {
			return "copystack"
		}
		if w := p.Layout.WaitReasons; int(reason) < len(w) && w[reason] != "" {
			return w[reason]
		}
		return fmt.Sprintf("waiting (reason %d)", reason)
	case gLeaked:
		return "leaked"
	}
	return fmt.Sprintf("status %d", status)
}

// frameAt symbolizes a run-time pc; ret says it is a return address (the
// call is the instruction before it).
func (p *Process) frameAt(pc uint64, ret bool) Frame {
	bin := p.binary()
	if pc < p.bias || bin == nil {
		return Frame{Func: fmt.Sprintf("%#x", pc)}
	}
	v := pc - p.bias
	if ret && v > 0 {
		v--
	}
	fr := bin.Frames(v)
	if len(fr) == 0 {
		return Frame{Func: fmt.Sprintf("%#x", pc)}
	}
	// The outermost frame is the physical function; a go statement's
	// site is the innermost (the line of the go statement).
	in := fr[0]
	return Frame{Func: in.Func, File: in.File, Line: in.Line}
}

// created computes the goroutines created since start: the runtime hands
// out goroutine IDs from sched.goidgen in batches to each P's cache, so
// the IDs handed out less those still unused in the Ps' caches.
func (p *Process) created() (uint64, error) {
	sched, err := p.addr(symSched)
	if err != nil {
		return 0, err
	}
	og, err := p.off("runtime.schedt.goidgen")
	if err != nil {
		return 0, err
	}
	gen, err := p.mem.U64(sched + og)
	if err != nil {
		return 0, fmt.Errorf("read sched.goidgen: %w", err)
	}
	ps, err := p.allPs()
	if err != nil {
		return 0, err
	}
	oc, err1 := p.off("runtime.p.goidcache")
	oe, err2 := p.off("runtime.p.goidcacheend")
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("p.goidcache not in the layout")
	}
	var unused uint64
	for _, pp := range ps {
		c, err1 := p.mem.U64(pp + oc)
		e, err2 := p.mem.U64(pp + oe)
		if err1 != nil || err2 != nil || e < c || e-c > 1<<20 {
			continue
		}
		unused += e - c
	}
	if unused > gen {
		return 0, fmt.Errorf("goroutine ID counters inconsistent (%d handed out, %d unused)", gen, unused)
	}
	return gen - unused, nil
}

// systemGoroutines reads sched.ngsys, the runtime's count of its own
// goroutines (the ones runtime.NumGoroutine leaves out).
func (p *Process) systemGoroutines() (int, error) {
	sched, err := p.addr(symSched)
	if err != nil {
		return 0, err
	}
	o, err := p.off("runtime.schedt.ngsys")
	if err != nil {
		return 0, err
	}
	v, err := p.mem.U32(sched + o)
	if err != nil {
		return 0, fmt.Errorf("read sched.ngsys: %w", err)
	}
	if int32(v) < 0 || v > maxGoroutines {
		return 0, fmt.Errorf("sched.ngsys holds %d: not a count", int32(v))
	}
	return int(v), nil
}

// maxPs bounds runtime.allp's length (GOMAXPROCS is at most 2^20 here).
const maxPs = 1 << 20

// allPs reads the pointers of runtime.allp.
func (p *Process) allPs() ([]uint64, error) {
	a, err := p.addr(symAllp)
	if err != nil {
		return nil, err
	}
	var hdr [24]byte
	if err := p.mem.ReadAt(hdr[:], a); err != nil {
		return nil, fmt.Errorf("read runtime.allp: %w", err)
	}
	arr, n := binary.LittleEndian.Uint64(hdr[:]), binary.LittleEndian.Uint64(hdr[8:])
	if n > maxPs {
		return nil, fmt.Errorf("runtime.allp holds %d Ps: not believed", n)
	}
	if n == 0 {
		return nil, nil
	}
	if !p.mem.Readable(arr, n*8) {
		return nil, fmt.Errorf("runtime.allp array of %d Ps at %#x: %w", n, arr, ErrBadAddress)
	}
	buf := make([]byte, n*8)
	if err := p.mem.ReadAt(buf, arr); err != nil {
		return nil, fmt.Errorf("read runtime.allp array: %w", err)
	}
	out := make([]uint64, 0, n)
	for i := range n {
		if pp := binary.LittleEndian.Uint64(buf[i*8:]); pp != 0 {
			out = append(out, pp)
		}
	}
	return out, nil
}
