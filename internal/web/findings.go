package web

import (
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/gosleuth/gosleuth/internal/doctor"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/window"
)

// finding is a doctor finding with where on the charts it began.
type finding struct {
	doctor.Finding
	// Began is the start of the first slice of the history in which the
	// rule fired (seconds since the epoch): a slice is Config.Slice long,
	// or the whole history for rules that need a long window (a leak).
	Began float64 `json:"began"`
}

// findings is the doctor's latest verdict on a watch's history.
type findings struct {
	List      []finding          `json:"findings"`
	Unchecked []doctor.Unchecked `json:"unchecked"`
	// CPUNote says how the CPU the rules judged was measured, when exact
	// syscall counting was on in part of the history.
	CPUNote string `json:"-"`
	// From and To bound the history the verdict covers.
	From, To float64 `json:"-"`
	began    map[string]float64
}

// mark is the sampler's window at one row of the ring: what its Builder
// counted since its run began (window.Config.NoSeries), so two marks of one
// run give the window between their rows (window.Between).
type mark struct {
	seq uint64
	run int // the sampler's run: each has a Builder of its own
	win *window.Window
	// quiet is the run's rows without exact counters attached, summed up
	// to this one.
	quiet quietBooks
}

// marks are the windows at the rows a doctor's window may start or end at:
// every row of the latest slice, the first and last of each run, and one
// row in sparse elsewhere, so the history's window starts at most sparse
// rows after its oldest row and memory stays a small share of the ring's.
type marks struct {
	list          []mark // oldest first
	runs          int
	dense, sparse uint64
}

// begin starts a run of the sampler and returns its number.
func (m *marks) begin() int {
	m.runs++
	return m.runs
}

// add records win at row seq of run, and forgets marks the doctor's
// windows no longer need, oldest being the oldest row the ring holds.
func (m *marks) add(seq uint64, run int, win *window.Window, quiet quietBooks, oldest uint64) {
	m.list = append(m.list, mark{seq, run, win, quiet})
	kept := m.list[:0]
	for i, k := range m.list {
		runEdge := i == 0 || m.list[i-1].run != k.run || i == len(m.list)-1 || m.list[i+1].run != k.run
		if k.seq >= oldest && (runEdge || k.seq+m.dense >= seq || k.seq%m.sparse == 0) {
			kept = append(kept, k)
		}
	}
	clear(m.list[len(kept):])
	m.list = kept
}

// markLocked records win, the sampler's window at the ring's newest row.
// w.mu is held.
func (w *watch) markLocked(sm *sampler, win *window.Window) {
	if win != nil {
		w.marks.add(w.ring.seq, sm.run, win, sm.quiet, w.ring.oldest())
	}
}

// sliceRows is how many rows a slice of the history holds (Config.Slice).
func (s *Server) sliceRows() uint64 {
	return uint64(max(2, int(s.cfg.Slice/s.cfg.Interval)))
}

// windowLocked builds the doctor's window over the rows from seq a to b
// (both held): its counters are the window layer's (window.Between of the
// marks of each run, window.Join of the runs), its series the levels the
// rows recorded. w.mu is held.
func (w *watch) windowLocked(sm *sampler, a, b uint64) (*doctor.Window, string) {
	var parts []*doctor.Window
	var quiet quietBooks
	var from *mark
	l := w.marks.list
	for i := 0; i < len(l); i++ {
		if l[i].seq < a || l[i].seq > b {
			continue
		}
		j := i
		for j+1 < len(l) && l[j+1].run == l[i].run && l[j+1].seq <= b {
			j++
		}
		if from == nil {
			from = &l[i]
		}
		if j > i {
			parts = append(parts, window.Between(l[i].win, l[j].win))
			quiet = quiet.plus(l[j].quiet.minus(l[i].quiet))
		}
		i = j
	}
	r := w.ring
	end := time.UnixMilli(int64(r.at(b, colT) * 1e3))
	if from == nil {
		from = &mark{seq: b, win: &doctor.Window{End: end}}
	}
	win := window.Join(parts...)
	if win == nil {
		win = &doctor.Window{End: end, IOCalls: -1}
	}
	// Exact counting's tracepoints run in the target and cost it CPU of
	// their own: where they were attached in part of the window, the CPU
	// is the rows' without them, at their rate over the rows sampled (a
	// gap between runs adds nothing, as to every other counter).
	var sampled float64
	for _, p := range parts {
		sampled += p.Seconds()
	}
	note := ""
	if attached := sampled - quiet.sec; attached > 1e-3 {
		if quiet.sec > 0 {
			win.AtQuietRate(quiet.sec, quiet.user, quiet.sys, sampled)
			note = fmt.Sprintf("CPU measured over the %.0f s of the history without exact syscall counting, whose tracepoints run in the process and cost it CPU (on for %.0f s)", quiet.sec, attached)
		} else {
			note = fmt.Sprintf("CPU includes exact syscall counting's cost: its tracepoints run in the process and were on for the whole %.0f s (turn them off for a while to measure without)", attached)
		}
	}
	// From the first mark's row, though its run may have added nothing
	// (a run with one row in the range): the series starts there too.
	win.Start = from.win.End
	win.PID, win.Comm, win.Cmdline, win.GoVersion = w.pid, w.comm, w.cmdline, w.facts.GoVersion
	win.Exited, win.AllowedCPUs, win.Go = w.exited, w.facts.AllowedCPUs, nil
	if w.facts.GOMAXPROCS > 0 {
		win.Go = &doctor.GoFacts{GOMAXPROCS: w.facts.GOMAXPROCS, GOMAXPROCSFrom: w.facts.GOMAXPROCSFrom}
	}
	win.Series, win.FDsKnown, win.FDLimit = nil, false, 0
	t0 := r.at(from.seq, colT)
	for s := from.seq; s <= b; s++ {
		if th := r.at(s, colThreads); !math.IsNaN(th) {
			p := doctor.Point{T: r.at(s, colT) - t0, RSS: uint64(r.at(s, colRSS)), Threads: int32(th)}
			if fds := r.at(s, colFDs); !math.IsNaN(fds) {
				p.FDs, win.FDsKnown = int32(fds), true
			}
			win.Series = append(win.Series, p)
		}
	}
	switch lim := r.at(b, colFDLimit); {
	case !math.IsNaN(lim):
		win.FDLimit = int64(lim)
	case win.FDsKnown:
		win.FDLimit = -1 // known descriptors but no limit: unlimited
	}
	if sm.exact != nil && sm.exactLast != nil {
		d := window.SyscallsBetween(syscalls.Reading{ByName: sm.exactBase}, syscalls.Reading{ByName: sm.exactLast})
		counts := map[string]uint64{}
		for name, n := range d.ByName {
			if n > 0 {
				counts[name] = n
			}
		}
		win.Syscalls = &doctor.Syscalls{Seconds: sm.exactLastT.Sub(sm.exactT0).Seconds(), Counts: counts, Mechanism: w.exactMech}
	}
	if n := len(sm.rtHist); n > 0 && sm.rtFirst != nil && sm.rtFirst != sm.rtHist[n-1] {
		win.Runtime, win.Go = window.RuntimeOf(w.runtimeFrom, sm.rtFirst, sm.rtHist[n-1], win.Go)
	}
	return win, note
}

// evaluate runs the doctor's rules over the whole history and over its
// latest slice, and records where each finding began.
func (w *watch) evaluate(sm *sampler, _ bool) {
	w.mu.Lock()
	r := w.ring
	if r.n < 3 {
		w.mu.Unlock()
		return
	}
	// The whole history, runs of the sampler joined (window.Join): a gap
	// between runs lengthens the window but adds nothing to its counters,
	// so rates over a history with gaps read low.
	first, last := r.oldest(), r.seq
	whole, cpuNote := w.windowLocked(sm, first, last)
	sliceRows := w.s.sliceRows()
	sliceFrom := max(first, last-min(last, sliceRows)+1)
	recent, _ := w.windowLocked(sm, sliceFrom, last)
	host := &doctor.Host{CPUs: w.s.cpus, Procs: 1, Start: whole.Start, End: whole.End, Root: os.Geteuid() == 0}
	w.mu.Unlock()

	found, unchecked := doctor.Evaluate(whole, host)
	inSlice, _ := doctor.Evaluate(recent, host)

	w.mu.Lock()
	defer w.mu.Unlock()
	f := &w.findings
	if f.began == nil {
		f.began = map[string]float64{}
	}
	for _, x := range inSlice {
		if _, ok := f.began[x.ID]; !ok {
			f.began[x.ID] = float64(recent.Start.UnixMilli()) / 1e3
		}
	}
	f.List = f.List[:0]
	for _, x := range found {
		b, ok := f.began[x.ID]
		if !ok {
			// Seen over the whole history but in no slice (a slow leak):
			// it began with the history.
			b = float64(whole.Start.UnixMilli()) / 1e3
			f.began[x.ID] = b
		}
		f.List = append(f.List, finding{Finding: x, Began: b})
	}
	f.Unchecked = unchecked
	f.CPUNote = cpuNote
	f.From, f.To = float64(whole.Start.UnixMilli())/1e3, float64(whole.End.UnixMilli())/1e3
	slices.SortStableFunc(f.List, func(a, b finding) int { return int(b.Severity - a.Severity) })
}

// onlineCPUs is the host's online CPU count under the procfs mount root,
// 0 when unknown.
func onlineCPUs(root string) int {
	n, err := proc.NewFS(root).OnlineCPUs()
	if err != nil {
		return 0
	}
	return n
}
