package compare

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

func (r *runner) run(ctx context.Context) error {
	c := &r.cfg
	p := &r.res.Protocol
	p.WindowsPerSide, p.WindowSeconds, p.WarmupSeconds, p.Seed = c.Windows, c.Window.Seconds(), c.Warmup.Seconds(), c.Seed
	p.Rate, p.Sweep = c.Rate, c.Sweep
	commands := r.res.Sides[0].Command != ""
	// Two servers cannot listen on one URL at once: one side runs at a time.
	if commands && c.loaded() {
		urls := map[string]bool{}
		for _, s := range c.Sides {
			urls[s.URL] = true
		}
		if len(urls) < len(c.Sides) && c.Keep {
			c.Keep = false
			r.res.Notes = append(r.res.Notes, "the sides share a load URL, so one side runs at a time: a fresh process for each window, not kept")
		}
	}
	p.Restart = !c.Keep && commands
	if commands {
		rp, err := startReaper()
		if err != nil {
			return err
		}
		r.reaper = rp
	}
	host, err := proc.NewReader(proc.Options{Root: c.ProcRoot, SkipKernelThreads: true})
	if err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	r.host = host
	if err := r.setupCPUs(commands); err != nil {
		return err
	}
	r.setupSyscalls()
	for i := range r.res.Sides {
		r.targets = append(r.targets, &target{idx: i, side: &r.res.Sides[i]})
	}
	switch {
	case !commands:
		p.Isolation = "both processes run throughout (they are not compare's to pause)"
	case p.Restart:
		p.Isolation = "one side runs at a time, a fresh process for each window"
	default:
		p.Isolation = "one process a side (--keep), the side not measured paused (SIGSTOP to its process group): a difference between the two processes is taken for one between the programs"
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	perSide := c.Windows
	if c.UntilDecided {
		perSide = 3
		p.Looks = plannedLooks(len(c.Sides), c.Windows, c.Window, c.SyscallWindow, c.Budget)
	}
	order := schedule(len(c.Sides), perSide, rng)
	// Kept processes start together and warm up in turn.
	if commands && !p.Restart {
		for _, t := range r.targets {
			if err := r.start(ctx, t); err != nil {
				return err
			}
			if err := r.pause(t); err != nil {
				return err
			}
		}
	}
	if !commands {
		for _, t := range r.targets {
			if err := proc.CheckTarget(c.ProcRoot, t.side.PID); err != nil {
				return fmt.Errorf("compare: side %s: %w", t.side.Name, err)
			}
			r.connectGC(ctx, t)
		}
	}
	if !commands || !p.Restart {
		for _, t := range r.targets {
			if err := r.activate(ctx, t); err != nil {
				return err
			}
			if err := r.warm(ctx, t, c.Warmup); err != nil {
				return err
			}
			if commands {
				if err := r.pause(t); err != nil {
					return err
				}
			}
		}
	}
	var all []int
	counts := make([]int, len(c.Sides))
	deadline := time.Now().Add(c.Budget)
	for {
		for _, s := range order {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("compare: interrupted: %w", err)
			}
			r.round = len(all)/len(c.Sides) + 1
			if err := r.slot(ctx, r.targets[s]); err != nil {
				return err
			}
			all = append(all, s)
			counts[s]++
		}
		if !c.UntilDecided {
			break
		}
		if r.decided(slices.Min(counts)) || slices.Min(counts) >= c.Windows ||
			time.Now().Add(time.Duration(len(c.Sides))*(c.Window+c.SyscallWindow)).After(deadline) {
			break
		}
		order = rng.Perm(len(c.Sides))
	}
	p.Order = orderString(r.res.Sides, all)
	p.WindowsPerSide = slices.Min(counts)
	return nil
}

// decided analyses the windows so far (one look of a sequential run) and
// reports whether every metric of Decide is decided.
func (r *runner) decided(perSide int) bool {
	ms := metricsFor(r.res.Windows, len(r.res.Sides))
	results := Analyze(r.res.Sides, r.res.Windows, ms, r.lookOptions())
	if r.res.DecidedAt == nil {
		r.res.DecidedAt = map[string]int{}
	}
	all := true
	for _, name := range r.cfg.Decide {
		found := false
		for _, mr := range results {
			if mr.Metric.Name != name {
				continue
			}
			found = true
			ok := true
			for _, cmp := range mr.Comparisons {
				if cmp.Verdict == Unknown {
					ok = false
				}
			}
			if ok {
				if _, seen := r.res.DecidedAt[name]; !seen {
					r.res.DecidedAt[name] = perSide
				}
			} else {
				delete(r.res.DecidedAt, name)
				all = false
			}
		}
		if !found {
			all = false
		}
	}
	return all
}

// slot takes one CPU window of t and, when syscalls are counted, one
// syscall window after it.
func (r *runner) slot(ctx context.Context, t *target) error {
	if err := r.activate(ctx, t); err != nil {
		return err
	}
	r.released()
	for try := 0; ; try++ {
		t0 := time.Now()
		w, err := r.cpuWindow(ctx, t)
		r.spent(&r.res.Time.CPUWindows, t0)
		if w.Dropped {
			r.spent(&r.res.Time.Dropped, t0)
		}
		if err != nil {
			return err
		}
		w.Round = r.round
		r.res.Windows = append(r.res.Windows, w)
		r.progress(w)
		if !w.Dropped {
			break
		}
		if try == 4 {
			return fmt.Errorf("compare: %w: side %s: 5 windows in a row dropped (%s): the load cannot be held at this rate", ErrTarget, t.side.Name, w.Why)
		}
	}
	for try := 0; r.counting; try++ {
		t0 := time.Now()
		w, err := r.syscallWindow(ctx, t)
		r.spent(&r.res.Time.SyscallWindows, t0)
		if err != nil {
			return err
		}
		// Counters attached just after others were released have been
		// seen to count nothing at all: a busy process making no syscall
		// in a whole window is that, not a measurement.
		if r.counting && w.Values[metricSyscalls.Name] == 0 {
			w.Dropped, w.Why = true, "the syscall counters counted nothing (attached while the kernel was releasing others)"
		}
		w.Round = r.round
		r.res.Windows = append(r.res.Windows, w)
		r.progress(w)
		if !w.Dropped || try == 2 {
			break
		}
	}
	return nil
}

// spent adds the time since t0 to *acc, in seconds.
func (r *runner) spent(acc *float64, t0 time.Time) {
	*acc += time.Since(t0).Seconds()
}

func (r *runner) progress(w Window) {
	if r.cfg.Progress == nil {
		return
	}
	name := r.res.Sides[w.Side].Name
	var parts []string
	if w.Kind == kindCPU {
		parts = append(parts, fmt.Sprintf("CPU %s%%", fmtVal(w.Values["cpu"])), fmt.Sprintf("wake-ups %s/s", fmtVal(w.Values["wakeups"])))
		if v, ok := w.Values["p99"]; ok {
			parts = append(parts, fmt.Sprintf("P99 %s ms", fmtVal(v)))
		}
	} else {
		parts = append(parts, fmt.Sprintf("syscalls %s/s", fmtVal(w.Values["syscalls"])))
	}
	if w.Dropped {
		parts = append(parts, "dropped: "+w.Why)
	}
	fmt.Fprintf(r.cfg.Progress, "window %d %s %s: %s\n", w.Index+1, name, w.Kind, strings.Join(parts, ", "))
}
