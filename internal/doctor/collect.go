package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// Look takes a close look at one process with a source beyond /proc
// (syscall counters, stack samples, runtime metrics).
type Look interface {
	// Source names what the look fills in.
	Source() Source
	// Look runs for at most d (less when ctx ends) and fills its part of
	// w. An error says why the source is unavailable for this process; it
	// is reported, never fatal.
	Look(ctx context.Context, pid int, d time.Duration, w *Window) error
}

// Config says what Collect observes.
type Config struct {
	// PIDs restricts the report to these processes; empty means the whole
	// host.
	PIDs []int
	// Duration is the length of the window.
	Duration time.Duration
	// Interval is the /proc sampling period (default 1 s, at most a fifth
	// of Duration).
	Interval time.Duration
	// ProcRoot is the procfs mount ("/proc" when empty).
	ProcRoot string
	// Looks are the close-look sources, tried on the processes chosen after
	// the first part of the window.
	Looks []Look
	// MaxLooks caps the processes looked at closely on a whole-host run
	// (default 4); explicit PIDs are all looked at.
	MaxLooks int
	// Progress, when set, receives one-line progress messages.
	Progress func(string)
}

// ErrNoProcess reports that none of the requested processes exists.
var ErrNoProcess = errors.New("process not found")

// acc accumulates one process's readings over the window.
type acc struct {
	first, last proc.Proc
	firstT      time.Time
	lastT       time.Time
	series      []Point
	children    int
	gone        bool
	// intervals counts readings after the first; reaps those in which the
	// children's CPU (cutime+cstime) grew, i.e. some child was reaped.
	intervals, reaps int
	// The affinity mask and Go facts, read once (window is built at the
	// pick and again at the end).
	factsRead bool
	allowed   int
	facts     *GoFacts
}

// Collect observes processes for cfg.Duration and returns their windows and
// the host. On a whole-host run close looks start once a first part of the
// window (30%, at least 2 s) has picked the processes worth them; processes
// named in cfg.PIDs are looked at from the first tick. Looks end with the
// window.
func Collect(ctx context.Context, cfg Config) ([]*Window, *Host, []string, error) {
	if cfg.Duration <= 0 {
		return nil, nil, nil, fmt.Errorf("collect: duration must be positive, got %v", cfg.Duration)
	}
	interval := cfg.Interval
	if interval <= 0 {
		interval = time.Second
	}
	interval = min(interval, max(cfg.Duration/5, 100*time.Millisecond))
	maxLooks := cfg.MaxLooks
	if maxLooks <= 0 {
		maxLooks = 4
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}

	r, err := proc.NewReader(proc.Options{Root: cfg.ProcRoot, SkipKernelThreads: true, FullEvery: 5})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("collect: %w", err)
	}
	defer r.Close()

	var snap proc.Snapshot
	if err := r.Snapshot(&snap); err != nil {
		return nil, nil, nil, fmt.Errorf("collect: read /proc: %w", err)
	}
	start := snap.Time
	wanted := map[int]bool{}
	for _, pid := range cfg.PIDs {
		if snap.Find(int32(pid)) == nil {
			return nil, nil, nil, fmt.Errorf("collect: process %d: %w", pid, ErrNoProcess)
		}
		wanted[pid] = true
	}
	type key struct {
		pid   int32
		start uint64
	}
	accs := map[key]*acc{}
	initial := map[key]bool{}
	observe := func(s *proc.Snapshot, first bool) {
		seen := make(map[key]bool, len(s.Procs))
		for i := range s.Procs {
			p := &s.Procs[i]
			k := key{p.PID, p.StartTime}
			seen[k] = true
			a := accs[k]
			if a == nil {
				a = &acc{first: *p, firstT: s.Time}
				accs[k] = a
				if first {
					initial[k] = true
				} else if parent := s.Find(p.PPID); parent != nil {
					if pa := accs[key{parent.PID, parent.StartTime}]; pa != nil {
						pa.children++
					}
				}
			}
			if !first && a.lastT != s.Time {
				a.intervals++
				if p.CUTime+p.CSTime > a.last.CUTime+a.last.CSTime {
					a.reaps++
				}
			}
			a.last, a.lastT = *p, s.Time
			a.series = append(a.series, Point{T: s.Time.Sub(start).Seconds(), RSS: p.RSSBytes, FDs: p.FDs, Threads: p.Threads})
		}
		for k, a := range accs {
			if !seen[k] {
				a.gone = true
			}
		}
	}
	observe(&snap, true)

	end := start.Add(cfg.Duration)
	// On a whole-host run the first part of the window picks who gets a
	// close look; processes named with --pid get theirs from the first tick.
	pick := start.Add(max(2*time.Second, cfg.Duration*3/10))
	if len(wanted) > 0 {
		pick = start
	}
	if pick.After(end) {
		pick = end
	}
	var notes []string
	var looksWG sync.WaitGroup
	var looksMu sync.Mutex
	looked := map[int]*Window{} // filled by looks, merged at the end
	lookCtx, cancelLooks := context.WithDeadline(ctx, end)
	defer cancelLooks()
	picked := false
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
			notes = append(notes, "interrupted: the report covers what was observed until then")
		case now := <-tick.C:
			if err := r.Snapshot(&snap); err != nil {
				return nil, nil, nil, fmt.Errorf("collect: read /proc: %w", err)
			}
			observe(&snap, false)
			if !now.Before(end) {
				done = true
			}
			progress(fmt.Sprintf("observing %d processes: %.0f of %.0f s", len(snap.Procs), now.Sub(start).Seconds(), cfg.Duration.Seconds()))
			if !picked && !now.Before(pick) && len(cfg.Looks) > 0 && end.Sub(now) >= time.Second {
				picked = true
				h := &Host{CPUs: onlineCPUs(), Start: start, End: now, Root: os.Geteuid() == 0}
				var cands []*Window
				for k, a := range accs {
					if a.gone || int(k.pid) == os.Getpid() || (len(wanted) > 0 && !wanted[int(k.pid)]) {
						continue
					}
					cands = append(cands, a.window(cfg.ProcRoot))
				}
				chosen := chooseLooks(cands, h, len(wanted) > 0, maxLooks)
				for _, w := range chosen {
					lw := &Window{PID: w.PID, GoVersion: w.GoVersion}
					looked[w.PID] = lw
					for _, l := range cfg.Looks {
						looksWG.Add(1)
						go func(l Look, pid int) {
							defer looksWG.Done()
							err := l.Look(lookCtx, pid, end.Sub(time.Now()), lw)
							if err != nil {
								looksMu.Lock()
								notes = append(notes, fmt.Sprintf("pid %d: %s: %v", pid, l.Source(), err))
								looksMu.Unlock()
							}
						}(l, w.PID)
					}
				}
				if len(chosen) > 0 {
					pids := make([]string, len(chosen))
					for i, w := range chosen {
						pids[i] = strconv.Itoa(w.PID)
					}
					progress("close look at " + strings.Join(pids, ", "))
				}
			}
		}
	}
	cancelLooks()
	looksWG.Wait()

	host := &Host{CPUs: onlineCPUs(), Procs: len(snap.Procs), Tasks: len(snap.Tasks), Start: start, End: snap.Time, Root: os.Geteuid() == 0}
	var out []*Window
	self := os.Getpid()
	for k, a := range accs {
		if len(wanted) > 0 && !wanted[int(k.pid)] {
			continue
		}
		if len(wanted) == 0 && int(k.pid) == self {
			continue // gosleuth's own cost is in its header, not a finding
		}
		if len(wanted) == 0 && !initial[k] && a.lastT.Sub(a.firstT) < interval {
			continue // a short-lived process: its parent's exec rule covers it
		}
		w := a.window(cfg.ProcRoot)
		if picked && len(cfg.Looks) > 0 && looked[w.PID] == nil {
			w.NotLooked = true
		}
		if lw := looked[w.PID]; lw != nil {
			looksMu.Lock()
			w.Syscalls, w.Stacks, w.Runtime = lw.Syscalls, lw.Stacks, lw.Runtime
			if lw.Go != nil {
				w.Go = lw.Go
			}
			looksMu.Unlock()
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *Window) int { return a.PID - b.PID })
	return out, host, notes, nil
}

// window turns the accumulated readings into a Window.
func (a *acc) window(root string) *Window {
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
		UserSec:      tick(sub(l.UTime, f.UTime)),
		SysSec:       tick(sub(l.STime, f.STime)),
		ChildUserSec: tick(sub(l.CUTime, f.CUTime)),
		ChildSysSec:  tick(sub(l.CSTime, f.CSTime)),
		VolCtxsw:     sub(l.VolCtxsw, f.VolCtxsw),
		InvolCtxsw:   sub(l.InvolCtxsw, f.InvolCtxsw),
		IOCalls:      -1,
		RunQueueSec:  float64(sub(l.WaitNS, f.WaitNS)) / 1e9,
		FDsKnown:     l.Known&proc.KnownFDs != 0,
		Series:       slices.Clone(a.series),
		ChildrenSeen: a.children,
	}
	if a.intervals > 0 {
		w.ReapShare = float64(a.reaps) / float64(a.intervals)
	}
	if l.Known&proc.KnownIO != 0 && f.Known&proc.KnownIO != 0 {
		w.IOCalls = int64(sub(l.SyscR+l.SyscW, f.SyscR+f.SyscW))
	}
	if l.Known&proc.KnownFDLimit != 0 {
		w.FDLimit = l.FDLimit
		if l.FDLimit == proc.Unlimited {
			w.FDLimit = -1
		}
	}
	if !a.factsRead {
		a.factsRead = true
		a.allowed = allowedCPUs(w.PID)
		if w.IsGo() {
			a.facts = goFacts(root, w.PID)
		}
	}
	w.AllowedCPUs, w.Go = a.allowed, a.facts
	return w
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// chooseLooks picks the processes worth a close look: every requested one,
// or on a whole-host run those a /proc rule flags and the Go processes with
// non-trivial CPU or wake-ups, busiest first.
func chooseLooks(ws []*Window, h *Host, all bool, n int) []*Window {
	if all {
		return ws
	}
	type scored struct {
		w     *Window
		score float64
	}
	var c []scored
	for _, w := range ws {
		found, _ := Evaluate(w, h)
		score := 0.0
		for _, f := range found {
			score += float64(1+f.Severity) * 10
		}
		if w.IsGo() && (w.Cores() >= 0.01 || w.WakeupsPerSec() >= 50) {
			score += 5
		}
		if score == 0 {
			continue
		}
		score += w.Cores() + w.WakeupsPerSec()/1000
		c = append(c, scored{w, score})
	}
	slices.SortFunc(c, func(a, b scored) int {
		if a.score > b.score {
			return -1
		}
		if a.score < b.score {
			return 1
		}
		return a.w.PID - b.w.PID
	})
	var out []*Window
	for i := 0; i < len(c) && i < n; i++ {
		out = append(out, c[i].w)
	}
	return out
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
