package window

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// Reader is where a Builder takes its /proc readings: a *proc.Reader, or a
// fixture in tests.
type Reader interface {
	Snapshot(dst *proc.Snapshot) error
}

// Config says what a Builder keeps.
type Config struct {
	// PIDs, when set, keeps only these processes; others read are ignored.
	PIDs []int
	// ProcRoot is the procfs mount the readings came from (/proc when
	// empty); the facts read once per process (allowed CPUs, GOMAXPROCS)
	// and the host's CPU count are read through it too.
	ProcRoot string
	// NoFacts skips reading GOMAXPROCS and allowed CPUs (the exporter's
	// fast path).
	NoFacts bool
	// NoSeries keeps only the last point of each process's series, for
	// views that keep their own history (the web page's ring).
	NoSeries bool
}

// Builder turns successive /proc readings into windows. Counters are
// summed interval by interval with proc.Rates (threads matched by TID), so
// the switches of a thread that exits inside the window are kept up to its
// last reading; a delta of the live threads' sum would lose them. It is
// not safe for concurrent use; the windows it returns are not changed
// afterwards.
type Builder struct {
	r        Reader
	fs       proc.FS
	noFacts  bool
	noSeries bool
	wanted   map[int32]bool

	snaps [2]proc.Snapshot
	cur   int // index of the latest reading in snaps
	n     int // readings taken
	rates proc.Rates
	start time.Time

	accs map[key]*acc
}

type key struct {
	pid   int32
	start uint64
}

// acc accumulates one process's readings.
type acc struct {
	first, last   proc.Proc
	firstT, lastT time.Time
	initial       bool // seen in the first reading
	// partial: first read after the first reading without its descriptor
	// count (proc.Options.DeferNew, or a process gosleuth may not read).
	partial    bool
	gone       bool
	vol, invol uint64
	waitNS     uint64
	runNS      uint64
	// runMissed: an interval whose readings lacked the threads, so
	// runNS is not the whole window's.
	runMissed bool
	series    []Point
	children  int
	// intervals counts readings after the first; reaps those in which
	// the children's CPU grew (some child was reaped).
	intervals, reaps int
	factsRead        bool
	allowed          int
	facts            *GoFacts
}

// NewBuilder returns a Builder reading from r.
func NewBuilder(r Reader, cfg Config) *Builder {
	b := &Builder{r: r, fs: proc.NewFS(cfg.ProcRoot), noFacts: cfg.NoFacts, noSeries: cfg.NoSeries, accs: map[key]*acc{}}
	if len(cfg.PIDs) > 0 {
		b.wanted = map[int32]bool{}
		for _, p := range cfg.PIDs {
			b.wanted[int32(p)] = true
		}
	}
	return b
}

// Read takes one reading and adds it to the windows. The snapshot returned
// is valid until the next Read.
func (b *Builder) Read() (*proc.Snapshot, error) {
	next := 1 - b.cur
	if b.n == 0 {
		next = b.cur
	}
	s := &b.snaps[next]
	if err := b.r.Snapshot(s); err != nil {
		return nil, fmt.Errorf("window: read /proc: %w", err)
	}
	if b.n == 0 {
		b.start = s.Time
		b.observe(nil, s)
	} else {
		prev := &b.snaps[b.cur]
		b.rates.Compute(prev, s)
		b.observe(&b.rates, s)
	}
	b.cur = next
	b.n++
	return s, nil
}

// Latest is the last reading taken, nil before the first.
func (b *Builder) Latest() *proc.Snapshot {
	if b.n == 0 {
		return nil
	}
	return &b.snaps[b.cur]
}

// Start is the time of the first reading.
func (b *Builder) Start() time.Time { return b.start }

func (b *Builder) observe(rates *proc.Rates, s *proc.Snapshot) {
	first := rates == nil
	seen := make(map[key]bool, len(s.Procs))
	for i := range s.Procs {
		p := &s.Procs[i]
		k := key{p.PID, p.StartTime}
		if b.wanted != nil && !b.wanted[p.PID] {
			// A new child of a wanted process is counted for it.
			if !first {
				if parent := s.Find(p.PPID); parent != nil && b.wanted[parent.PID] {
					if pa := b.accs[key{parent.PID, parent.StartTime}]; pa != nil && b.accs[k] == nil {
						pa.children++
						b.accs[k] = &acc{gone: true} // a marker: counted once
					}
				}
			}
			continue
		}
		seen[k] = true
		a := b.accs[k]
		if a == nil {
			a = &acc{first: *p, firstT: s.Time, initial: first, partial: !first && p.Known&proc.KnownFDs == 0}
			b.accs[k] = a
			if !first {
				if parent := s.Find(p.PPID); parent != nil {
					if pa := b.accs[key{parent.PID, parent.StartTime}]; pa != nil {
						pa.children++
					}
				}
			}
		} else if a.partial && p.Known&proc.KnownFDs != 0 {
			// First read by its stat alone (proc.Options.DeferNew): its
			// window starts at this, its first full reading, so no series
			// begins with an unknown descriptor count (which the rules
			// would read as a rise). It loses at most one interval of a
			// process born inside the window.
			*a = acc{first: *p, firstT: s.Time, children: a.children}
		} else if !first && a.lastT != s.Time {
			a.intervals++
			if p.CUTime+p.CSTime > a.last.CUTime+a.last.CSTime {
				a.reaps++
			}
			if r := &rates.Procs[i]; !r.New {
				a.vol += r.Vol
				a.invol += r.Invol
				a.waitNS += r.WaitNS
				a.runNS += r.RunNS
				a.runMissed = a.runMissed || !r.RunKnown
			} else {
				a.runMissed = true
			}
		}
		a.last, a.lastT = *p, s.Time
		pt := Point{T: s.Time.Sub(b.start).Seconds(), RSS: p.RSSBytes, FDs: p.FDs, Threads: p.Threads}
		if b.noSeries && len(a.series) > 0 {
			a.series[0] = pt
		} else {
			a.series = append(a.series, pt)
		}
	}
	for k, a := range b.accs {
		if !seen[k] && a.lastT != (time.Time{}) {
			a.gone = true
		}
	}
}

// Windows returns a window for each process kept, by PID. A process that
// lived less than minLife and was not there at the first reading is left
// out (0 keeps all).
func (b *Builder) Windows(minLife time.Duration) []*Window {
	var out []*Window
	for _, a := range b.accs {
		if a.lastT.IsZero() {
			continue // a child marker
		}
		if !a.initial && a.lastT.Sub(a.firstT) < minLife {
			continue
		}
		out = append(out, b.window(a))
	}
	slices.SortFunc(out, func(x, y *Window) int {
		if x.PID != y.PID {
			return x.PID - y.PID
		}
		return x.Start.Compare(y.Start)
	})
	return out
}

// Window returns the window of the latest process with pid, nil when none
// was read.
func (b *Builder) Window(pid int) *Window {
	var best *acc
	for k, a := range b.accs {
		if int(k.pid) == pid && !a.lastT.IsZero() && (best == nil || a.firstT.After(best.firstT)) {
			best = a
		}
	}
	if best == nil {
		return nil
	}
	return b.window(best)
}

// Host describes the machine over the readings so far.
func (b *Builder) Host() *Host {
	h := &Host{Start: b.start, Root: os.Geteuid() == 0}
	if n, err := b.fs.OnlineCPUs(); err == nil {
		h.CPUs = n
	}
	if s := b.Latest(); s != nil {
		h.Procs, h.Tasks, h.End = len(s.Procs), len(s.Tasks), s.Time
	}
	return h
}

// window builds a's window; the facts read once per process are kept.
func (b *Builder) window(a *acc) *Window {
	f, l := &a.first, &a.last
	tick := func(d uint64) float64 { return float64(d) / proc.ClockTicks }
	w := &Window{
		PID:          int(l.PID),
		Comm:         l.Comm,
		Cmdline:      l.Cmdline,
		GoVersion:    l.GoVersion,
		Start:        a.firstT,
		End:          a.lastT,
		Exited:       a.gone,
		TickUserSec:  tick(proc.Delta(f.UTime, l.UTime)),
		TickSysSec:   tick(proc.Delta(f.STime, l.STime)),
		ChildUserSec: tick(proc.Delta(f.CUTime, l.CUTime)),
		ChildSysSec:  tick(proc.Delta(f.CSTime, l.CSTime)),
		VolCtxsw:     a.vol,
		InvolCtxsw:   a.invol,
		IOCalls:      -1,
		RunQueueSec:  float64(a.waitNS) / 1e9,
		RunSec:       float64(a.runNS) / 1e9,
		RunKnown:     a.intervals > 0 && !a.runMissed,
		lifeUser:     float64(l.UTime),
		lifeSys:      float64(l.STime),
		FDsKnown:     l.Known&proc.KnownFDs != 0,
		Series:       slices.Clone(a.series),
		ChildrenSeen: a.children,
	}
	if c, ok := proc.ParseContainer(l.Cgroup); ok {
		w.Container = &c
	}
	w.splitCPU()
	w.intervals, w.reaps = a.intervals, a.reaps
	w.setReapShare()
	if r, wr, ok := proc.IOCalls(f, l); ok {
		w.ReadCalls, w.WriteCalls = r, wr
		w.IOCalls = int64(r + wr)
	}
	if l.Known&proc.KnownFDLimit != 0 {
		w.FDLimit = l.FDLimit
		if l.FDLimit == proc.Unlimited {
			w.FDLimit = -1
		}
	}
	if !a.factsRead && !b.noFacts {
		a.factsRead = true
		if cpus, err := b.fs.AllowedCPUs(w.PID); err == nil {
			a.allowed = len(cpus)
		}
		if w.IsGo() {
			a.facts = goFacts(b.fs.Root(), w.PID)
		}
	}
	w.AllowedCPUs, w.Go = a.allowed, a.facts
	return w
}

// goFacts finds the GOMAXPROCS a Go process runs with, as its Go version
// computes it (environment, affinity mask, cgroup CPU limit), nil when it
// cannot be told.
func goFacts(root string, pid int) *GoFacts {
	f, err := goruntime.Discover(root, pid)
	if err != nil || !f.IsGo || f.GOMAXPROCS <= 0 {
		return nil
	}
	return &GoFacts{GOMAXPROCS: f.GOMAXPROCS, GOMAXPROCSFrom: f.GOMAXPROCSFrom}
}

// Between is what one process did from the end of earlier to the end of
// later, two windows of it from one Builder (earlier taken first): its
// counters are later's minus earlier's, its series the points read after
// earlier ended. Views that report per step or per tick (load's target
// watch) take it instead of subtracting readings themselves.
func Between(earlier, later *Window) *Window {
	w := *later
	w.Start = earlier.End
	sub := func(a, b float64) float64 { return max(b-a, 0) }
	w.TickUserSec = sub(earlier.TickUserSec, later.TickUserSec)
	w.TickSysSec = sub(earlier.TickSysSec, later.TickSysSec)
	w.ChildUserSec = sub(earlier.ChildUserSec, later.ChildUserSec)
	w.ChildSysSec = sub(earlier.ChildSysSec, later.ChildSysSec)
	w.RunQueueSec = sub(earlier.RunQueueSec, later.RunQueueSec)
	w.RunSec = sub(earlier.RunSec, later.RunSec)
	w.RunKnown = earlier.RunKnown && later.RunKnown
	w.splitCPU()
	w.VolCtxsw = proc.Delta(earlier.VolCtxsw, later.VolCtxsw)
	w.InvolCtxsw = proc.Delta(earlier.InvolCtxsw, later.InvolCtxsw)
	w.ChildrenSeen = max(later.ChildrenSeen-earlier.ChildrenSeen, 0)
	w.intervals = max(later.intervals-earlier.intervals, 0)
	w.reaps = max(later.reaps-earlier.reaps, 0)
	w.setReapShare()
	if earlier.IOCalls >= 0 && later.IOCalls >= 0 {
		w.ReadCalls = proc.Delta(earlier.ReadCalls, later.ReadCalls)
		w.WriteCalls = proc.Delta(earlier.WriteCalls, later.WriteCalls)
		w.IOCalls = int64(w.ReadCalls + w.WriteCalls)
	} else {
		w.IOCalls = -1
	}
	// A builder's series only grow: the points after earlier's are new
	// (with Config.NoSeries, the last point).
	w.Series = nil
	if n := len(earlier.Series); n < len(later.Series) {
		w.Series = slices.Clone(later.Series[n:])
	} else if len(later.Series) == 1 && later.End.After(earlier.End) {
		w.Series = slices.Clone(later.Series)
	}
	return &w
}

// Join is what one process did over consecutive windows of it, oldest
// first (runs of sampling with gaps between them, each from a Builder of
// its own, as the web page's history keeps them): counters summed, levels
// and facts the last's, the series one after the other with times from
// the first's start. Its span runs from the first's start to the last's
// end, so a gap adds time but nothing to the counters. Join of one window
// is a copy of it; of none, nil.
func Join(parts ...*Window) *Window {
	if len(parts) == 0 {
		return nil
	}
	first, last := parts[0], parts[len(parts)-1]
	w := *last
	w.Start = first.Start
	w.Series = nil
	w.UserSec, w.SysSec, w.TickUserSec, w.TickSysSec = 0, 0, 0, 0
	w.ChildUserSec, w.ChildSysSec, w.RunQueueSec, w.RunSec = 0, 0, 0, 0
	w.VolCtxsw, w.InvolCtxsw, w.ReadCalls, w.WriteCalls = 0, 0, 0, 0
	w.ChildrenSeen, w.intervals, w.reaps = 0, 0, 0
	w.RunKnown = true
	for _, p := range parts {
		// Each part's CPU is already split by its own ticks.
		w.UserSec += p.UserSec
		w.SysSec += p.SysSec
		w.TickUserSec += p.TickUserSec
		w.TickSysSec += p.TickSysSec
		w.ChildUserSec += p.ChildUserSec
		w.ChildSysSec += p.ChildSysSec
		w.RunQueueSec += p.RunQueueSec
		w.RunSec += p.RunSec
		w.RunKnown = w.RunKnown && p.RunKnown
		w.VolCtxsw += p.VolCtxsw
		w.InvolCtxsw += p.InvolCtxsw
		w.ChildrenSeen += p.ChildrenSeen
		w.intervals += p.intervals
		w.reaps += p.reaps
		if w.IOCalls >= 0 && p.IOCalls >= 0 {
			w.ReadCalls += p.ReadCalls
			w.WriteCalls += p.WriteCalls
		} else {
			w.IOCalls = -1
		}
		off := p.Start.Sub(first.Start).Seconds()
		for _, pt := range p.Series {
			pt.T += off
			w.Series = append(w.Series, pt)
		}
	}
	if w.IOCalls >= 0 {
		w.IOCalls = int64(w.ReadCalls + w.WriteCalls)
	}
	w.setReapShare()
	return &w
}

// setReapShare sets ReapShare from its parts.
func (w *Window) setReapShare() {
	w.ReapShare = 0
	if w.intervals > 0 {
		w.ReapShare = float64(w.reaps) / float64(w.intervals)
	}
}
