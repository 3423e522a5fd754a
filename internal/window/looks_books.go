package window

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// Books is what the Go runtime's own books, read from the process's memory
// (package gomem) at the window's start and end, say about where its memory
// and CPU go: goroutine groups with the stacks they hold, the goroutines
// created in the window, the heap profile's top sites and the GC's state
// against its goal and limit.
type Books struct {
	// Seconds is the span between the two reads.
	Seconds float64
	// Goroutines is the program's goroutines at the end (the runtime's own
	// left out), StackBytes the stack memory all live goroutines hold.
	Goroutines int
	StackBytes uint64
	// Created is the goroutines created between the reads, when
	// CreatedKnown.
	Created      uint64
	CreatedKnown bool
	// Groups are the program's largest goroutine groups at the end (by
	// count), at most maxBookGroups: enough to add up the groups one
	// function starts in several states.
	Groups []BookGroup
	// HeapProfile is true when the heap profile was read; else
	// HeapProfileWhy says why not (memory profiling off in the binary).
	HeapProfile    bool
	HeapProfileWhy string `json:",omitempty"`
	// HeapInUseBytes and HeapInUseObjects are the heap profile's in-use
	// totals (scaled estimates, as of the last GC); TopBytes and
	// TopObjects its largest sites by in-use bytes and by in-use objects,
	// at most maxHeapSites each.
	HeapInUseBytes, HeapInUseObjects int64
	TopBytes, TopObjects             []HeapSite
	// TopAlloc are the sites that allocated the most bytes during the
	// window (their AllocBytes and AllocObjects are what the heap profile
	// counted between the two reads), at most maxHeapSites; AllocSeconds
	// is the span those counts cover: the runtime publishes them when a
	// cycle ends, so it runs from the last cycle before the first read to
	// the last before the second. Empty when fewer than one cycle ended
	// between the reads or the heap profile was read only once.
	TopAlloc     []HeapSite `json:",omitempty"`
	AllocSeconds float64    `json:",omitempty"`
	// AllocTotalBytes is what every site allocated over AllocSeconds
	// (the heap profile's scaled estimate).
	AllocTotalBytes int64 `json:",omitempty"`
	// Start and End are the GC's state at the two reads.
	Start, End BookGC
	// Notes say what could not be read.
	Notes []string `json:",omitempty"`
}

// BookGroup is goroutines with one start function, creation site and
// state, and the memory they hold.
type BookGroup struct {
	Count int
	// State is "running", "runnable", "syscall" or the wait reason.
	State string
	// Start is the function the goroutines run; CreatedBy the go statement
	// that started them; WaitsIn the program's frame nearest the top of
	// their unwound stacks (where they wait), empty when none was unwound.
	Start, CreatedBy, WaitsIn Site
	// StackBytes is the stack memory the group holds.
	StackBytes uint64
	// MaxWait is the longest a goroutine of the group has been blocked,
	// where the runtime recorded it (seconds, 0 when unknown).
	MaxWait float64
	// HeapBytes and HeapObjects are the in-use heap allocated under the
	// group's start function at sites holding at most perGoroutineObjects
	// objects per goroutine of the group (each goroutine's buffers and
	// state, not a shared cache the goroutines filled), -1 without a heap
	// profile.
	HeapBytes, HeapObjects int64
	// HeapSites are those sites, largest in-use bytes first (at most 3).
	HeapSites []HeapSite `json:",omitempty"`
}

// Parked reports whether the group's goroutines wait (a wait reason, not
// running, runnable or in a syscall).
func (g BookGroup) Parked() bool {
	switch g.State {
	case "running", "runnable", "syscall", "":
		return false
	}
	return true
}

// HeapSite is an allocation site of the heap profile with its scaled
// estimates: the innermost frame outside the runtime, and the frames above
// it (innermost first, at most 8).
type HeapSite struct {
	Site
	Stack                    []string `json:",omitempty"`
	InUseBytes, InUseObjects int64
	AllocBytes, AllocObjects int64
	// Own is the program's own frame nearest the allocation (the code
	// that keeps what was allocated): the site itself when it is the
	// program's, else the first frame of its stack outside the standard
	// library; the site when there is none.
	Own Site
}

// BookGC is the GC's state at one read.
type BookGC struct {
	Time   time.Time
	Cycles uint32
	// LastGC is when the last cycle ended.
	LastGC time.Time
	// GOGC (-1: off) and the memory limit (math.MaxInt64: none).
	GOGC        int32
	MemoryLimit int64
	GOMAXPROCS  int
	// HeapMarked is the heap the last cycle marked live, HeapLive the
	// heap in use now, HeapGoal where the next cycle ends; ScanHeap the
	// scannable (pointer-holding) part of the heap.
	HeapMarked, HeapLive, HeapGoal, ScanHeap uint64
	// HeapObjects is the live objects (allocated less freed).
	HeapObjects uint64
	// StackInUse is the stack spans in use.
	StackInUse uint64
	// AllocBytes and AllocObjects are cumulative allocations.
	AllocBytes, AllocObjects uint64
	// GCTotal, GCAssist and CPUTotal are cumulative CPU seconds as of the
	// last completed cycle: the GC's, mark assist's, and the runtime's
	// count of CPU available to it (GOMAXPROCS times wall time); CPUKnown
	// says they were read.
	GCTotal, GCAssist, CPUTotal float64
	CPUKnown                    bool
}

// Bounds of what a window keeps of the books.
const (
	maxBookGroups = 20
	maxHeapSites  = 5
	// perGoroutineObjects bounds the objects per goroutine a heap site
	// may hold to count as the goroutines' own (a reader's buffer, a
	// bufio.Reader and its slice).
	perGoroutineObjects = 4
)

// NoMemoryLimit is the memory limit of a runtime without one.
const NoMemoryLimit = math.MaxInt64

// GCCores is the CPU (in cores) the GC took between the last cycles before
// the two reads, and false when fewer than two cycles ended between them
// (the runtime updates its CPU counts only when a cycle ends).
func (b *Books) GCCores() (gc, assist float64, ok bool) {
	s, e := b.Start, b.End
	if !s.CPUKnown || !e.CPUKnown || e.Cycles < s.Cycles+2 || e.GOMAXPROCS <= 0 {
		return 0, 0, false
	}
	wall := (e.CPUTotal - s.CPUTotal) / float64(e.GOMAXPROCS)
	if wall <= 0 {
		return 0, 0, false
	}
	return (e.GCTotal - s.GCTotal) / wall, (e.GCAssist - s.GCAssist) / wall, true
}

// CyclesPerSec is the GC cycles that ended per second between the reads.
func (b *Books) CyclesPerSec() float64 {
	return PerSec(float64(b.End.Cycles-min(b.Start.Cycles, b.End.Cycles)), b.Seconds)
}

// AllocPerSec is the bytes the program allocated per second between the
// reads (the runtime's own count), and false when it was not read.
func (b *Books) AllocPerSec() (float64, bool) {
	if b.Seconds <= 0 || !b.End.Time.After(b.Start.Time) || b.End.AllocBytes < b.Start.AllocBytes {
		return 0, false
	}
	return float64(b.End.AllocBytes-b.Start.AllocBytes) / b.Seconds, true
}

// CreatedPerSec is the goroutines created per second, and false when the
// runtime's count was not read.
func (b *Books) CreatedPerSec() (float64, bool) {
	if !b.CreatedKnown || b.Seconds <= 0 {
		return 0, false
	}
	return float64(b.Created) / b.Seconds, true
}

// booksReader reads a process's books at the window's start and end.
type booksReader struct {
	p     *gomem.Process
	own   bool // opened here, closed by finish
	start *gomem.Stats
	c0    *gomem.Census
	// h0 is the heap profile at the start, nil when it was not read.
	h0    *gomem.HeapProfile
	notes []string
}

// startBooks opens the books of process pid (through the runtime source's
// reader when it reads memory, else on its own) and takes the window's
// first reading. It returns nil when the process's memory cannot be read.
func startBooks(src goruntime.Source, procRoot string, pid int) *booksReader {
	r := &booksReader{}
	if m, ok := src.(goruntime.MemoryReader); ok {
		r.p = m.Process()
	} else {
		p, err := gomem.Open(proc.NewFS(procRoot), pid)
		if err != nil {
			return nil
		}
		r.p, r.own = p, true
	}
	var err error
	if r.c0, err = r.p.Census(gomem.CensusOptions{Unwind: -1}); err != nil {
		r.notes = append(r.notes, fmt.Sprintf("goroutines at the start: %v", err))
	}
	if r.start, err = r.p.Stats(); err != nil {
		r.notes = append(r.notes, fmt.Sprintf("GC state at the start: %v", err))
	}
	// Without a heap profile, finish says why; a failed first read only
	// leaves the window without its allocation ranking.
	r.h0, _ = r.p.HeapProfile()
	return r
}

// close releases the process when startBooks opened it.
func (r *booksReader) close() {
	if r != nil && r.own {
		r.p.Close()
	}
}

// finish takes the window's last reading and returns the books; nil when
// neither reading of the goroutines worked.
func (r *booksReader) finish() *Books {
	if r == nil {
		return nil
	}
	c1, err := r.p.Census(gomem.CensusOptions{})
	if err != nil {
		return nil
	}
	b := &Books{Notes: r.notes}
	st, err := r.p.Stats()
	if err != nil {
		b.Notes = append(b.Notes, fmt.Sprintf("GC state at the end: %v", err))
	}
	if r.c0 != nil {
		b.Seconds = c1.Time.Sub(r.c0.Time).Seconds()
		if r.c0.CreatedKnown && c1.CreatedKnown && c1.Created >= r.c0.Created {
			b.Created, b.CreatedKnown = c1.Created-r.c0.Created, true
		}
	}
	b.Goroutines = c1.Total - c1.System
	b.StackBytes = c1.StackBytes
	if r.start != nil {
		b.Start = bookGC(r.start)
	}
	if st != nil {
		b.End = bookGC(st)
	}
	var sites []gomem.Site
	h, err := r.p.HeapProfile()
	switch {
	case errors.Is(err, gomem.ErrMemProfilingOff):
		b.HeapProfileWhy = "memory profiling is off in the binary (the linker disabled it: nothing references the heap profile)"
	case err != nil:
		b.HeapProfileWhy = fmt.Sprintf("heap profile: %v", err)
	default:
		b.HeapProfile = true
		sites = r.p.Sites(h)
		for _, s := range sites {
			b.HeapInUseBytes += s.InUseBytes
			b.HeapInUseObjects += s.InUseObjects
		}
		b.TopBytes = topSites(sites, func(s gomem.Site) int64 { return s.InUseBytes })
		b.TopObjects = topSites(sites, func(s gomem.Site) int64 { return s.InUseObjects })
		b.TopAlloc, b.AllocSeconds = r.allocated(h, b)
	}
	b.Groups = bookGroups(c1, sites, b.HeapProfile)
	return b
}

// allocated ranks the sites by the bytes the heap profile counted between
// the window's first reading and h, with the span the counts cover.
func (r *booksReader) allocated(h *gomem.HeapProfile, b *Books) ([]HeapSite, float64) {
	t0, t1 := b.Start.LastGC, b.End.LastGC
	if r.h0 == nil || h.GCCycles <= r.h0.GCCycles || t0.IsZero() || !t1.After(t0) {
		return nil, 0
	}
	d, shrank := h.Since(r.h0)
	if shrank > 0 {
		b.Notes = append(b.Notes, fmt.Sprintf("allocations: %d sites counted less at the end than at the start (a torn read), left out", shrank))
	}
	sites := r.p.Sites(d)
	top := topSites(sites, func(s gomem.Site) int64 { return s.AllocBytes })
	if len(top) == 0 {
		return nil, 0
	}
	for _, s := range sites {
		b.AllocTotalBytes += s.AllocBytes
	}
	return top, t1.Sub(t0).Seconds()
}

func bookGC(st *gomem.Stats) BookGC {
	return BookGC{
		Time: st.Time, Cycles: st.GCCycles, LastGC: st.LastGC, GOGC: st.GOGC, MemoryLimit: st.MemoryLimit, GOMAXPROCS: st.GOMAXPROCS,
		HeapMarked: st.HeapMarked, HeapLive: st.HeapLive, HeapGoal: st.HeapGoal, ScanHeap: st.ScanHeap,
		HeapObjects: st.AllocObjects - min(st.FreeObjects, st.AllocObjects), StackInUse: st.StackInUse,
		AllocBytes: st.AllocBytes, AllocObjects: st.AllocObjects,
		GCTotal: st.GCTotal.Seconds(), GCAssist: st.GCAssist.Seconds(), CPUTotal: st.CPUTotal.Seconds(),
		CPUKnown: st.CPUTotal > 0,
	}
}

// heapSite converts a gomem site, naming the program's own frame nearest
// the allocation.
func heapSite(s gomem.Site) HeapSite {
	hs := HeapSite{Site: Site{Func: s.Func, File: s.File, Line: s.Line},
		InUseBytes: s.InUseBytes, InUseObjects: s.InUseObjects, AllocBytes: s.AllocBytes, AllocObjects: s.AllocObjects}
	for _, f := range s.Stack {
		hs.Stack = append(hs.Stack, f.Func)
	}
	hs.Own = hs.Site
	for _, f := range s.Stack {
		if pkg := funcPkg(f.Func); pkg != "" && !stdlibPkg(pkg) {
			hs.Own = Site{Func: f.Func, File: f.File, Line: f.Line}
			break
		}
	}
	return hs
}

// topSites returns the maxHeapSites sites largest by key (positive only).
func topSites(sites []gomem.Site, key func(gomem.Site) int64) []HeapSite {
	s := slices.Clone(sites)
	slices.SortStableFunc(s, func(a, b gomem.Site) int { return cmp.Compare(key(b), key(a)) })
	var out []HeapSite
	for _, x := range s {
		if len(out) == maxHeapSites || key(x) <= 0 {
			break
		}
		out = append(out, heapSite(x))
	}
	return out
}

// bookGroups keeps the census's largest program groups, each with where
// its goroutines wait (from the unwound stacks) and the in-use heap
// allocated under its start function.
func bookGroups(c *gomem.Census, sites []gomem.Site, profiled bool) []BookGroup {
	var out []BookGroup
	for _, g := range c.Groups {
		if g.System {
			continue
		}
		bg := BookGroup{Count: g.Count, State: g.State, StackBytes: g.StackBytes, MaxWait: g.MaxWait.Seconds(),
			Start:     Site{Func: g.Start.Func, File: g.Start.File, Line: g.Start.Line},
			CreatedBy: Site{Func: g.CreatedBy.Func, File: g.CreatedBy.File, Line: g.CreatedBy.Line},
			HeapBytes: -1, HeapObjects: -1}
		bg.WaitsIn = waitsIn(c, g)
		if profiled {
			bg.HeapBytes, bg.HeapObjects = 0, 0
			var held []gomem.Site
			for _, s := range sites {
				if s.InUseBytes > 0 && s.InUseObjects <= perGoroutineObjects*int64(g.Count) &&
					slices.ContainsFunc(s.Stack, func(f gomem.Frame) bool { return f.Func == g.Start.Func }) {
					bg.HeapBytes += s.InUseBytes
					bg.HeapObjects += s.InUseObjects
					held = append(held, s)
				}
			}
			for _, s := range held {
				if len(bg.HeapSites) == 3 {
					break
				}
				bg.HeapSites = append(bg.HeapSites, heapSite(s))
			}
		}
		out = append(out, bg)
	}
	slices.SortStableFunc(out, func(a, b BookGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(b.StackBytes, a.StackBytes))
	})
	if len(out) > maxBookGroups {
		out = out[:maxBookGroups]
	}
	return out
}

// waitsIn finds, among the census's unwound stacks of group g (same start
// function and state), the largest, and returns its program frame nearest
// the top (else its top frame).
func waitsIn(c *gomem.Census, g gomem.Group) Site {
	best := -1
	for i, s := range c.Stacks {
		if s.System || s.State != g.State || len(s.Frames) == 0 {
			continue
		}
		// The outermost frame past runtime.goexit and the go statement's
		// wrapper (F.gowrap1, which the census names by the function it
		// starts).
		outer := len(s.Frames) - 1
		for outer > 0 && (s.Frames[outer].Func == "runtime.goexit" || strings.Contains(s.Frames[outer].Func, ".gowrap")) {
			outer--
		}
		if s.Frames[outer].Func != g.Start.Func {
			continue
		}
		if best < 0 || s.Count > c.Stacks[best].Count {
			best = i
		}
	}
	if best < 0 {
		return Site{}
	}
	fr := c.Stacks[best].Frames
	for _, f := range fr {
		if pkg := funcPkg(f.Func); pkg != "" && !stdlibPkg(pkg) {
			return Site{Func: f.Func, File: f.File, Line: f.Line}
		}
	}
	// No frame of the program's (a library's goroutine): the first frame
	// past the runtime, the poller and the readers it waits under.
	for _, f := range fr {
		if pkg := funcPkg(f.Func); pkg != "" && !utilityPkg(pkg) && pkg != "net" {
			return Site{Func: f.Func, File: f.File, Line: f.Line}
		}
	}
	return Site{Func: fr[0].Func, File: fr[0].File, Line: fr[0].Line}
}
