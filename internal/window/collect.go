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
	// QuietCPU measures the CPU of the processes looked at with nothing of
	// gosleuth attached to them, in a stretch before the looks and one
	// after them (QuietSpan), and gives their windows that CPU: the looks'
	// tracepoints, samplers and probes run in the target and cost it CPU
	// that is gosleuth's, not the target's. A note per process gives both
	// figures.
	QuietCPU bool
	// Progress, when set, receives one-line progress messages.
	Progress func(string)
}

// QuietSpan is how long each of the two stretches with nothing attached
// lasts in a window of d with QuietCPU: a fifth of it, 250 ms to 2 s. On a
// whole-host run the first stretch is the part of the window before
// triage, which is longer.
func QuietSpan(d time.Duration) time.Duration {
	return min(2*time.Second, max(d/5, 250*time.Millisecond))
}

// releaseWait bounds how long Collect waits, after the looks, for their
// events to be released before it measures the second quiet stretch:
// releasing a syscall counter's tracepoints takes about 30 ms each (1.7 s
// for a ticker's 46 syscalls), and the target pays for them until then.
const releaseWait = 5 * time.Second

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
	quiet := cfg.QuietCPU && len(cfg.Looks) > 0
	span := QuietSpan(cfg.Duration)
	// On a whole-host run the first part of the window picks who gets a
	// close look (Triage); processes named with --pid get theirs from the
	// first tick, or after the first quiet stretch with QuietCPU.
	pick := start.Add(max(2*time.Second, cfg.Duration*3/10))
	if !whole {
		pick = start
		if quiet {
			pick = start.Add(span)
		}
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
	// With QuietCPU, the windows of the processes looked at when the looks
	// began and once the looks had ended and released their events: the
	// CPU before the first and after the second is measured with nothing
	// attached.
	var before, after map[int]*Window
	var releases sync.WaitGroup
	cancelLooks := context.CancelFunc(func() {})
	defer func() { cancelLooks() }()
	lookEnd := end
	var tail time.Duration // the quiet stretch after the looks
	picked := false
	var lookEndC <-chan time.Time // fires at lookEnd when a quiet stretch follows the looks
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
			notes = append(notes, "interrupted: the report covers what was observed until then")
		case <-lookEndC:
			// The looks have ended: once they have released their
			// events, the second quiet stretch begins.
			lookEndC = nil
			progress("measuring CPU with nothing attached")
			cancelLooks()
			looksWG.Wait()
			if waitTimeout(ctx, &releases, releaseWait) {
				snap, err := wb.Read()
				if err != nil {
					return nil, nil, nil, fmt.Errorf("collect: %w", err)
				}
				after = windowsOf(wb, before)
				end = later(end, snap.Time.Add(tail))
				// Readings from here on a period that divides the
				// stretch, so the last one falls at its end.
				n := (end.Sub(snap.Time) + interval - 1) / interval
				tick.Reset(end.Sub(snap.Time) / max(n, 1))
			} // else still attached: the first stretch alone
		case now := <-tick.C:
			snap, err := wb.Read()
			if err != nil {
				return nil, nil, nil, fmt.Errorf("collect: %w", err)
			}
			progress(fmt.Sprintf("observing %d processes: %.0f of %.0f s", len(snap.Procs), now.Sub(start).Seconds(), cfg.Duration.Seconds()))
			if !now.Before(end) {
				done = true
			}
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
				if quiet {
					// The second quiet stretch leaves the looks a
					// second at least.
					if tail = min(span, end.Sub(now)-time.Second); tail < 100*time.Millisecond {
						tail = 0
					}
					lookEnd = end.Add(-tail)
					before = map[int]*Window{}
					for _, w := range chosen {
						before[w.PID] = w
					}
				}
				lookCtx, cancel := context.WithDeadline(withReleases(ctx, &releases), lookEnd)
				cancelLooks = cancel
				if tail > 0 && len(chosen) > 0 {
					lookEndTimer := time.NewTimer(time.Until(lookEnd))
					defer lookEndTimer.Stop()
					lookEndC = lookEndTimer.C
				}
				for _, w := range chosen {
					for _, l := range cfg.Looks {
						lw := &Window{PID: w.PID, GoVersion: w.GoVersion}
						parts = append(parts, part{w.PID, lw})
						looksWG.Add(1)
						go func(l Look, pid int) {
							defer looksWG.Done()
							err := l.Look(lookCtx, pid, time.Until(lookEnd), lw)
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
		if looked {
			if n := quietCPU(w, before[w.PID], after[w.PID]); n != "" {
				notes = append(notes, n)
			}
		}
		out = append(out, w)
	}
	return out, host, notes, nil
}

// quietCPU gives w, the window of a process looked at, the CPU it used with
// nothing attached: over b, its window up to the looks, and from a, its
// window once they had ended and released their events (nil when there
// was no such stretch), to w's end, at that rate over the whole window. It
// returns a note giving both figures, "" when nothing was measured quiet
// (the process exited, or was not seen before the looks). Wake-ups are left
// as counted: the looks add none.
func quietCPU(w, b, a *Window) string {
	if b == nil || b.Exited || w.Exited || b.Seconds() <= 0 || w.Seconds() <= 0 {
		return ""
	}
	sec, user, sys := b.Seconds(), b.UserSec, b.SysSec
	during := Between(b, w)
	stretches := fmt.Sprintf("the first %.1f s", b.Seconds())
	if a != nil && !a.Exited {
		if t := Between(a, w); t.Seconds() > 0 {
			sec, user, sys = sec+t.Seconds(), user+t.UserSec, sys+t.SysSec
			stretches = fmt.Sprintf("the first %.1f s (%.1f%%) and the last %.1f s (%.1f%%)", b.Seconds(), 100*b.Cores(), t.Seconds(), 100*t.Cores())
		}
		during = Between(b, a)
	}
	w.AtQuietRate(sec, user, sys, w.Seconds())
	return fmt.Sprintf("CPU of pid %d: %.1f%% of a core (sys %.1f%%), measured over %s of the window with nothing of gosleuth attached; %.1f%% while the close looks ran and released their events (their tracepoints, samplers and probes run in the target)",
		w.PID, 100*(user+sys)/sec, 100*sys/sec, stretches, 100*during.Cores())
}

// windowsOf returns the builder's current windows of the processes in pids.
func windowsOf(wb *Builder, pids map[int]*Window) map[int]*Window {
	out := map[int]*Window{}
	for _, w := range wb.Windows(0) {
		if pids[w.PID] != nil {
			out[w.PID] = w
		}
	}
	return out
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitTimeout waits for wg for at most d, or until ctx ends, and reports
// whether it finished.
func waitTimeout(ctx context.Context, wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}

// releasesKey is the context key of the WaitGroup that looks add their
// background releases to (withReleases).
type releasesKey struct{}

// withReleases returns ctx carrying wg, to which looks that release their
// events in the background add (holdRelease).
func withReleases(ctx context.Context, wg *sync.WaitGroup) context.Context {
	return context.WithValue(ctx, releasesKey{}, wg)
}

// holdRelease records a release that goes on after a look returns, for a
// Collect waiting for it, and returns the func that says it has ended.
func holdRelease(ctx context.Context) func() {
	wg, _ := ctx.Value(releasesKey{}).(*sync.WaitGroup)
	if wg == nil {
		return func() {}
	}
	wg.Add(1)
	return wg.Done
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
