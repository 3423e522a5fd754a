package window

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

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

// CollectConfig says what Collect observes.
type CollectConfig struct {
	// PIDs restricts the report to these processes; empty means the whole
	// host.
	PIDs []int
	// Duration is the length of the window.
	Duration time.Duration
	// Interval is the /proc sampling period (default 1 s, at most a fifth
	// of Duration).
	Interval time.Duration
	// ProcRoot is the procfs mount (/proc when empty).
	ProcRoot string
	// Looks are the close-look sources, tried on the processes chosen after
	// the first part of the window.
	Looks []Look
	// MaxLooks caps the processes looked at closely on a whole-host run
	// (default 4); explicit PIDs are all looked at.
	MaxLooks int
	// Triage picks, on a whole-host run, at most n of the windows of the
	// window's first part for close looks (the doctor's Triage, which
	// judges them by its rules). Nil looks at none of them: close looks
	// then run only on PIDs named.
	Triage func(ws []*Window, h *Host, n int) []*Window
	// Progress, when set, receives one-line progress messages.
	Progress func(string)
}

// ErrNoProcess reports that none of the requested processes exists.
var ErrNoProcess = errors.New("process not found")

// Collect observes processes for cfg.Duration and returns their windows and
// the host. On a whole-host run close looks start once a first part of the
// window (30%, at least 2 s) has picked the processes worth them; processes
// named in cfg.PIDs are looked at from the first tick. Looks end with the
// window.
func Collect(ctx context.Context, cfg CollectConfig) ([]*Window, *Host, []string, error) {
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

	// On a whole host, as root, the task iterator reads every thread and
	// process in one read(2) a tick (proc.Options.TasksFromBPF): under
	// 5,000 new processes a second a tick cost 4.5 ms of /proc reads and
	// costs 1.1 ms, for 30 ms of BTF at start (bench/reader-churn). A
	// process that appears after the first reading is read in full only
	// when it is seen again (DeferNew): a whole-host run leaves out
	// processes that lived less than an interval, and reading the
	// identity and threads of every one at first sight was 40% of a run
	// under 5,000 new processes a second.
	r, err := proc.NewReader(proc.Options{Root: cfg.ProcRoot, SkipKernelThreads: true, FullEvery: 5, TasksFromBPF: len(cfg.PIDs) == 0, DeferNew: len(cfg.PIDs) == 0})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("collect: %w", err)
	}
	defer r.Close()
	wb := NewBuilder(r, Config{PIDs: cfg.PIDs, ProcRoot: cfg.ProcRoot})
	snap, err := wb.Read()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("collect: %w", err)
	}
	start := snap.Time
	for _, pid := range cfg.PIDs {
		if snap.Find(int32(pid)) == nil {
			return nil, nil, nil, fmt.Errorf("collect: process %d: %w", pid, ErrNoProcess)
		}
	}
	whole := len(cfg.PIDs) == 0
	self := os.Getpid()

	end := start.Add(cfg.Duration)
	// On a whole-host run the first part of the window picks who gets a
	// close look (Triage); processes named with --pid get theirs from the
	// first tick.
	pick := start.Add(max(2*time.Second, cfg.Duration*3/10))
	if !whole {
		pick = start
	}
	if pick.After(end) {
		pick = end
	}
	var notes []string
	var looksWG sync.WaitGroup
	var looksMu sync.Mutex
	// Each look fills a part of its own; parts are merged into the windows
	// once every look has ended, so no window is written by two goroutines.
	type part struct {
		pid int
		w   *Window
	}
	var parts []part
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
			snap, err := wb.Read()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("collect: %w", err)
			}
			if !now.Before(end) {
				done = true
			}
			progress(fmt.Sprintf("observing %d processes: %.0f of %.0f s", len(snap.Procs), now.Sub(start).Seconds(), cfg.Duration.Seconds()))
			if !picked && !now.Before(pick) && len(cfg.Looks) > 0 && end.Sub(now) >= time.Second {
				picked = true
				var cands []*Window
				for _, w := range wb.Windows(0) {
					if !w.Exited && w.PID != self {
						cands = append(cands, w)
					}
				}
				chosen := cands
				if whole {
					chosen = nil
					if cfg.Triage != nil {
						chosen = cfg.Triage(cands, wb.Host(), maxLooks)
					}
				}
				for _, w := range chosen {
					for _, l := range cfg.Looks {
						lw := &Window{PID: w.PID, GoVersion: w.GoVersion}
						parts = append(parts, part{w.PID, lw})
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

	host := wb.Host()
	minLife := time.Duration(0)
	if whole {
		minLife = interval // a short-lived process: its parent's exec rule covers it
	}
	var out []*Window
	for _, w := range wb.Windows(minLife) {
		if whole && w.PID == self {
			continue // gosleuth's own cost is in its header, not a finding
		}
		looked := false
		for _, p := range parts {
			if p.pid != w.PID {
				continue
			}
			looked = true
			if p.w.Syscalls != nil {
				w.Syscalls = p.w.Syscalls
			}
			if p.w.Stacks != nil {
				w.Stacks = p.w.Stacks
			}
			if p.w.Runtime != nil {
				w.Runtime = p.w.Runtime
			}
			if p.w.Probes != nil {
				w.Probes = p.w.Probes
			}
			if p.w.Files != nil {
				w.Files = p.w.Files
			}
			if p.w.Go != nil {
				w.Go = p.w.Go
			}
		}
		w.NotLooked = picked && len(cfg.Looks) > 0 && !looked
		out = append(out, w)
	}
	return out, host, notes, nil
}
