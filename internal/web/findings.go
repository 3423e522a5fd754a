package web

import (
	"math"
	"os"
	"slices"
	"time"

	"github.com/gosleuth/gosleuth/internal/doctor"
	"github.com/gosleuth/gosleuth/internal/proc"
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
	// From and To bound the history the verdict covers.
	From, To float64 `json:"-"`
	began    map[string]float64
}

// windowLocked builds the doctor's window over the rows from seq a to b
// (both held) from the recorded rates, so the deltas have proc.Rates'
// semantics (the switches of threads that exit are kept). w.mu is held.
func (w *watch) windowLocked(sm *sampler, a, b uint64) *doctor.Window {
	r := w.ring
	win := &doctor.Window{
		PID: w.pid, Comm: w.comm, Cmdline: w.cmdline, GoVersion: w.facts.GoVersion,
		Start:       time.UnixMilli(int64(r.at(a, colT) * 1e3)),
		End:         time.UnixMilli(int64(r.at(b, colT) * 1e3)),
		Exited:      w.exited,
		IOCalls:     -1,
		AllowedCPUs: w.facts.AllowedCPUs,
	}
	if w.facts.GOMAXPROCS > 0 {
		win.Go = &doctor.GoFacts{GOMAXPROCS: w.facts.GOMAXPROCS, GOMAXPROCSFrom: w.facts.GOMAXPROCSFrom}
	}
	var io float64
	ioKnown := true
	var intervals, reaps int
	t0 := r.at(a, colT)
	for s := a; s <= b; s++ {
		t := r.at(s, colT)
		if s > a && !math.IsNaN(r.at(s, colUsr)) && !math.IsNaN(r.at(s-1, colT)) {
			dt := t - r.at(s-1, colT)
			pct := func(c col) float64 { return r.at(s, c) / 100 * dt }
			win.UserSec += pct(colUsr)
			win.SysSec += pct(colSys)
			win.ChildUserSec += pct(colCUsr)
			win.ChildSysSec += pct(colCSys)
			win.RunQueueSec += pct(colRunQ)
			win.VolCtxsw += uint64(math.Round(r.at(s, colWake) * dt))
			win.InvolCtxsw += uint64(math.Round(r.at(s, colInvol) * dt))
			if sr, sw := r.at(s, colSysR), r.at(s, colSysW); !math.IsNaN(sr) && !math.IsNaN(sw) {
				io += (sr + sw) * dt
			} else {
				ioKnown = false
			}
			intervals++
			if r.at(s, colCUsr)+r.at(s, colCSys) > 0 {
				reaps++
			}
		}
		if th := r.at(s, colThreads); !math.IsNaN(th) {
			p := doctor.Point{T: t - t0, RSS: uint64(r.at(s, colRSS)), Threads: int32(th)}
			if fds := r.at(s, colFDs); !math.IsNaN(fds) {
				p.FDs, win.FDsKnown = int32(fds), true
			}
			win.Series = append(win.Series, p)
		}
	}
	if ioKnown && intervals > 0 {
		win.IOCalls = int64(math.Round(io))
	}
	if intervals > 0 {
		win.ReapShare = float64(reaps) / float64(intervals)
	}
	switch lim := r.at(b, colFDLimit); {
	case !math.IsNaN(lim):
		win.FDLimit = int64(lim)
	case win.FDsKnown:
		win.FDLimit = -1 // known descriptors but no limit: unlimited
	}
	if sm.exact != nil && sm.exactLast != nil {
		counts := map[string]uint64{}
		for name, n := range sm.exactLast {
			if d := proc.Delta(sm.exactBase[name], n); d > 0 {
				counts[name] = d
			}
		}
		win.Syscalls = &doctor.Syscalls{Seconds: sm.exactLastT.Sub(sm.exactT0).Seconds(), Counts: counts, Mechanism: w.exactMech}
	}
	if n := len(sm.rtHist); n > 0 && sm.rtFirst != nil && sm.rtFirst != sm.rtHist[n-1] {
		win.Runtime, win.Go = window.RuntimeOf(w.runtimeFrom, sm.rtFirst, sm.rtHist[n-1], win.Go)
	}
	return win
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
	// The whole history since the sampler last (re)started a run of rows
	// without a gap would be truer for rates, but rules over rates of the
	// watched time read the same: gaps add no time (dt skips them).
	first, last := r.oldest(), r.seq
	whole := w.windowLocked(sm, first, last)
	sliceRows := uint64(max(2, int(w.s.cfg.Slice/w.s.cfg.Interval)))
	sliceFrom := max(first, last-min(last, sliceRows)+1)
	recent := w.windowLocked(sm, sliceFrom, last)
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
