package doctor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Thresholds of the rules on goroutines read from the runtime's books.
const (
	// Memory held by parked goroutines is a finding from this many
	// goroutines started by one function: fewer hold little whatever
	// their buffers.
	goMemMinGoroutines = 1000
	// It costs the program when what they hold is at least this much and
	// this share of the process's Go memory (the heap in use and the
	// stacks): a gateway of 4,000 connections with 64 KB read buffers
	// holds 270 MB of its 280; the GC's goal doubles that heap again, and
	// GOMEMLIMIT counts it. Below the warning, from goMemInfoBytes, it is
	// information (a server with a few thousand goroutines holds a few
	// MB of 2 KB stacks: nothing).
	goMemWarnBytes = 64 << 20
	goMemInfoBytes = 16 << 20
	goMemShare     = 1.0 / 3
	// Goroutine churn: creations per second worth reading at all, and
	// per CPU-second from which starting, scheduling and ending them is
	// a real part of the work. Starting and ending a goroutine costs the
	// scheduler about a microsecond and, when a P is idle, a thread
	// wake-up (futex) of several: a goroutine per 20 us of CPU or less
	// spends a tenth of the CPU or more on that (a patient starting one
	// per 2 us of hashing spent 54% of its samples in the scheduler).
	churnMinPerSec    = 10000.0
	churnPerCPUSecMin = 50000.0
	// With stack samples the cost is measured: the scheduler's share of
	// samples (lower bound) at least this much, and that share in cores at
	// least churnMinCores (a handler fanning each request out to 16
	// goroutines at 1,000 requests a second spent 1.3% of a core on them:
	// information). Without samples the cost is put at a microsecond per
	// goroutine.
	churnSchedShare = 0.15
	churnMinCores   = 0.05
	churnCostPerG   = 1e-6
)

func init() {
	register(&Rule{ID: "goroutine-memory", Summary: "memory held by parked goroutines: their stacks and the buffers allocated under them", Missing: needBooks, Check: checkGoroutineMemory})
	register(&Rule{ID: "goroutine-churn", Summary: "goroutines started and ended at a high rate per CPU-second (a go statement per small task)", Missing: needBooks, Check: checkGoroutineChurn})
}

// needBooks asks for the runtime's books, read from the process's memory.
func needBooks(w *Window) string {
	if !w.IsGo() || books(w) != nil {
		return ""
	}
	return "needs the Go runtime's books read from the process's memory: run as root (or as the process's user where ptrace is allowed)"
}

// creatorGroup adds up the parked goroutine groups one function starts
// (a reader and a writer per connection are two groups of one accept
// loop).
type creatorGroup struct {
	creator    string
	count      int
	stackBytes uint64
	// heapBytes is -1 without a heap profile.
	heapBytes int64
	groups    []window.BookGroup
}

func (c creatorGroup) held() uint64 { return c.stackBytes + uint64(max(c.heapBytes, 0)) }

// parkedByCreator groups the books' parked goroutines by the function
// whose go statements started them, most memory first.
func parkedByCreator(b *window.Books) []creatorGroup {
	idx := map[string]int{}
	var out []creatorGroup
	for _, g := range b.Groups {
		if !g.Parked() {
			continue
		}
		key := g.CreatedBy.Func
		if key == "" {
			key = g.Start.Func
		}
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, creatorGroup{creator: key})
		}
		c := &out[i]
		c.count += g.Count
		c.stackBytes += g.StackBytes
		if g.HeapBytes < 0 {
			c.heapBytes = -1
		} else if c.heapBytes >= 0 {
			c.heapBytes += g.HeapBytes
		}
		c.groups = append(c.groups, g)
	}
	slices.SortStableFunc(out, func(a, b creatorGroup) int { return cmp.Compare(b.held(), a.held()) })
	return out
}

// goMemory is the process's Go memory as of the last GC, the basis of the
// heap profile's figures: the heap it marked live, and the stacks.
func goMemory(b *window.Books) uint64 {
	return b.End.HeapMarked + max(b.End.StackInUse, b.StackBytes)
}

func checkGoroutineMemory(w *Window, h *Host) *Finding {
	b := books(w)
	if !w.IsGo() || b == nil {
		return nil
	}
	cg := parkedByCreator(b)
	if len(cg) == 0 {
		return nil
	}
	c := cg[0]
	held := c.held()
	total := goMemory(b)
	// Without the heap profile the buffers they hold are in the heap but
	// not attributable: their share of Go memory cannot be told, and the
	// stacks alone are information.
	if c.count < goMemMinGoroutines || held < goMemInfoBytes || total == 0 ||
		c.heapBytes >= 0 && float64(held) < goMemShare*float64(total) {
		return nil
	}
	sev := Info
	if held >= goMemWarnBytes && float64(held) >= goMemShare*float64(total) {
		sev = Warn
	}
	main := c.groups[0]
	var states []string
	for _, g := range c.groups {
		states = append(states, fmt.Sprintf("%d in %s (%s)", g.Count, g.State, shortFunc(g.Start.Func)))
	}
	ev := EvidenceList{
		{"goroutines", c.count, ""},
		{"states", strings.Join(states, ", "), ""},
		{"stack_mb", mb(c.stackBytes), "MB"},
		{"per_goroutine_kb", round(float64(held)/float64(c.count)/1024, 1), "KB"},
		{"go_memory_mb", mb(total), "MB (heap marked live by the last GC, and stacks)"},
		{"share_of_go_memory_pct", pct(float64(held) / float64(total)), "%"},
	}
	// How long they have waited, where the runtime recorded it (it
	// stamps a parked goroutine during a GC cycle).
	longest := 0.0
	for _, g := range c.groups {
		longest = max(longest, g.MaxWait)
	}
	if longest > 0 {
		ev = append(ev, Evidence{"longest_wait_s", round(longest, 1), "s"})
	}
	heapText := ""
	switch {
	case c.heapBytes > 0:
		ev = append(ev, Evidence{"heap_mb", mb(uint64(c.heapBytes)), "MB (heap profile, as of the last GC)"})
		heapText = fmt.Sprintf(" and %.0f MB of heap allocated under them", mb(uint64(c.heapBytes)))
	case c.heapBytes < 0:
		ev = append(ev, Evidence{"heap", b.HeapProfileWhy + ": the buffers they hold are not counted", ""})
		if b.End.HeapMarked > b.End.ScanHeap {
			ev = append(ev, Evidence{"pointer_free_heap_kb_per_goroutine", round(float64(b.End.HeapMarked-b.End.ScanHeap)/float64(c.count)/1024, 1), "KB"})
		}
	}
	site := main.WaitsIn.Func
	if site == "" {
		site = main.Start.Func
	}
	var code []CodeRef
	for _, g := range c.groups {
		if len(code) >= 4 {
			break
		}
		if g.CreatedBy.Func != "" {
			code = append(code, CodeRef{Func: g.CreatedBy.Func, File: g.CreatedBy.File, Line: g.CreatedBy.Line, Role: fmt.Sprintf("starts %d goroutines running %s, parked in %s", g.Count, g.Start.Func, g.State), Share: round(float64(g.Count)/float64(c.count), 3), From: "runtime books"})
		}
		if g.WaitsIn.Func != "" {
			code = append(code, CodeRef{Func: g.WaitsIn.Func, File: g.WaitsIn.File, Line: g.WaitsIn.Line, Role: "where they wait (" + g.State + ")", From: "runtime books"})
		}
		for _, s := range g.HeapSites {
			if len(code) >= 6 {
				break
			}
			o := s.Own
			code = append(code, CodeRef{Func: o.Func, File: o.File, Line: o.Line, Role: fmt.Sprintf("allocates what they hold: %.1f MB in %d objects at %s", mb(uint64(s.InUseBytes)), s.InUseObjects, s.Func), From: "heap profile"})
		}
	}
	perConn := len(c.groups) > 1 && c.groups[1].Count*2 >= c.groups[0].Count
	fix := []string{}
	if c.heapBytes > 0 && uint64(c.heapBytes) >= c.stackBytes {
		fix = append(fix, "Make the buffers smaller (size them to the messages, not the largest one), or borrow them only while there is data: wait with a small read (or a zero-byte read) and take a buffer from a sync.Pool when it returns.")
	}
	if perConn {
		fix = append(fix, "Use one goroutine per connection instead of a reader and a writer (write from the goroutine that produces the message, under a lock), halving the stacks.")
	}
	if strings.HasPrefix(main.Start.Func, "net/http.") {
		fix = append(fix, "For idle keep-alive connections of an HTTP server, set http.Server.IdleTimeout so they are closed after a while.")
	}
	fix = append(fix, "Where latency allows, an event-loop library (gnet, nbio, netpoll) serves all connections from a few goroutines, with buffers only for connections that have data.")
	cause := fmt.Sprintf("%d goroutines started by %s are parked (%s), one or more per connection or task, and each keeps its stack%s for as long as it waits: %.0f MB in all, %.0f%% of the process's Go memory, which the GC's heap goal then doubles.",
		c.count, c.creator, main.State, map[bool]string{true: " and its own buffers", false: ""}[c.heapBytes > 0], mb(held), 100*float64(held)/float64(total))
	conf := "high"
	if c.heapBytes < 0 {
		conf = "medium"
		cause += " Without the heap profile only their stacks are counted; any buffers each holds come on top."
	}
	return &Finding{
		Severity:   sev,
		Title:      fmt.Sprintf("%d goroutines parked in %s hold %.0f MB of stacks%s", c.count, site, mb(c.stackBytes), heapText),
		Observed:   fmt.Sprintf("%d parked goroutines hold %.0f MB", c.count, mb(held)),
		Evidence:   ev,
		Cause:      cause,
		Fix:        strings.Join(fix, " "),
		Sources:    []Source{SourceRuntime},
		Confidence: conf,
		Code:       code,
	}
}

// shortFunc drops a function's package path ("net/http.(*conn).serve" ->
// "http.(*conn).serve").
func shortFunc(fn string) string {
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

func checkGoroutineChurn(w *Window, h *Host) *Finding {
	b := books(w)
	if !w.IsGo() || b == nil || w.Cores() < insideMinCores {
		return nil
	}
	rate, ok := b.CreatedPerSec()
	if !ok || rate < churnMinPerSec {
		return nil
	}
	perCPU := rate / w.Cores()
	ev := EvidenceList{
		{"goroutines_created_per_s", round(rate, 0), "/s"},
		{"created_per_cpu_s", round(perCPU, 0), "per CPU-second"},
		{"cpu_us_per_goroutine", round(1e6/perCPU, 1), "us"},
		{"cpu_pct", pct(w.Cores()), "% of a core"},
	}
	sources := []Source{SourceRuntime}
	cores := rate * churnCostPerG
	costly := perCPU >= churnPerCPUSecMin
	if st := w.Stacks; st != nil && st.Samples >= minSamples {
		n := float64(st.Samples)
		s := st.Classes[ClassScheduler]
		low := wilsonLower(s*n, n, shareZ)
		cores = s * w.Cores()
		ev = append(ev, Evidence{"scheduler_share_pct", pct(s), "% of samples"}, Evidence{"scheduler_cpu_pct", pct(cores), "% of a core"})
		sources = append(sources, SourceStacks)
		costly = costly && low >= churnSchedShare
	}
	costly = costly && cores >= churnMinCores
	// Per request, where the process serves requests (stack samples on a
	// server's request path) and its writes count them: an HTTP/1.1
	// response is one write.
	perReq := 0.0
	if _, ok := serving(w); ok {
		if wr, ok := w.Syscalls.Rate(writeCalls...); ok && wr > 0 {
			perReq = rate / wr
			ev = append(ev, Evidence{"goroutines_per_response", round(perReq, 1), "(one write per response)"})
		}
	}
	code := codeAt(w, "newproc", "starts a goroutine per task")
	if len(code) == 0 {
		// The census at the window's end may hold some of them, running
		// or about to.
		for _, g := range b.Groups {
			if !g.Parked() && g.CreatedBy.Func != "" && g.Start.Func != "runtime.main" {
				code = append(code, CodeRef{Func: g.CreatedBy.Func, File: g.CreatedBy.File, Line: g.CreatedBy.Line, Role: "starts goroutines running " + g.Start.Func + " (caught live at the window's end)", From: "runtime books"})
				break
			}
		}
	}
	sources = codeSources(sources, code)
	f := &Finding{
		Severity:   Info,
		Title:      fmt.Sprintf("%.0f goroutines started a second", rate),
		Observed:   fmt.Sprintf("%.0f goroutines started a second, one per %.1f us of CPU", rate, 1e6/perCPU),
		Evidence:   ev,
		Cause:      fmt.Sprintf("The program starts %.0f goroutines a second, one per %.1f us of its CPU%s.", rate, 1e6/perCPU, perRequest(perReq)),
		Fix:        "Nothing to change while each goroutine has real work; if they do little each, a fixed pool of workers fed by a channel does the same work without starting, scheduling and ending a goroutine per task.",
		Sources:    sources,
		Confidence: "high",
		Code:       code,
	}
	if costly {
		f.Severity = Warn
		f.Title = fmt.Sprintf("%.0f goroutines started a second, one per %.1f us of CPU: starting and scheduling them is much of the work", rate, 1e6/perCPU)
		f.Cause += " Each goroutine is created, scheduled, often handed to another thread (a futex wake when a P is idle) and torn down for a task of a few microseconds: the scheduler's part of the CPU rivals the work itself."
		f.Fix = "Feed the tasks to a fixed pool of workers (GOMAXPROCS of them) through a channel, or batch many small tasks per goroutine; keep a goroutine per task only where each does enough work (tens of microseconds and up) or waits."
		f.Cores = cores
	}
	return f
}

// perRequest says how many goroutines a request starts, "" when unknown.
func perRequest(n float64) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", about %.0f per request served", n)
}
