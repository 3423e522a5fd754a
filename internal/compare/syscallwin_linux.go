package compare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gosleuth/gosleuth/internal/load"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"golang.org/x/sys/unix"
)

// setupSyscalls prepares the syscall events, or says why there are none.
func (r *runner) setupSyscalls() {
	p := &r.res.Protocol
	if r.cfg.Syscalls == "off" || r.cfg.SyscallWindow == 0 {
		p.Syscalls = "not counted (--syscalls off)"
		return
	}
	if err := syscalls.ExactAvailable(); err != nil {
		p.Syscalls = "not counted: " + err.Error()
		return
	}
	p.SyscallSeconds = r.cfg.SyscallWindow.Seconds()
	r.counting = true
	// One BPF program per process costs one RCU grace period to release
	// where the per-task counters cost one per syscall counted: 1.35 s
	// a syscall window, 27 s of a default run.
	if syscalls.BPFWorks() {
		r.mech = syscalls.BPF
		p.Syscalls = fmt.Sprintf("exact counts from one BPF program on raw_syscalls:sys_enter per process (every syscall, %d by name), in windows of their own after each CPU window: syscall tracing taxes the target", len(syscalls.CountedNames))
		return
	}
	p.Syscalls = fmt.Sprintf("exact per-task tracepoint counters (%d syscalls and the total), in windows of their own after each CPU window: tracepoints tax the target", len(syscalls.CountedNames))
}

// syscallWindow counts t's syscalls for one window of their own.
func (r *runner) syscallWindow(ctx context.Context, t *target) (Window, error) {
	w := Window{Index: len(r.res.Windows), Side: t.idx, Kind: kindSyscalls, Life: max(t.life, 1), Values: map[string]float64{}}
	tree, err := r.tree(t)
	if err != nil {
		return w, err
	}
	step, err := r.startLoad(ctx, t, t.side.Name+" syscalls", r.cfg.SyscallWindow)
	if err != nil {
		return w, err
	}
	var counters []*syscalls.Exact
	// One counter after the other: closing them side by side made each
	// wait on the others' grace periods (1.2 s instead of 30 ms here).
	closeAll := func() {
		for _, c := range counters {
			c.Close()
		}
	}
	pids := r.counted(tree)
	for _, pid := range pids {
		c, err := syscalls.CountExact(pid, syscalls.ExactOptions{FS: proc.NewFS(r.cfg.ProcRoot), Mechanism: r.mech, Total: true})
		if errors.Is(err, unix.ESRCH) && len(pids) > 1 {
			continue
		}
		if err != nil {
			closeAll()
			if step != nil {
				<-step
			}
			if r.cfg.Syscalls == "on" || r.mech == syscalls.BPF {
				return w, fmt.Errorf("compare: count syscalls of side %s: %w", t.side.Name, err)
			}
			// Without root or tracefs: no syscall windows from now on.
			r.counting = false
			r.res.Protocol.Syscalls = "not counted: " + err.Error()
			r.res.Protocol.SyscallSeconds = 0
			return w, nil
		}
		counters = append(counters, c)
	}
	var sum syscalls.Reading
	start, sec, err := r.countWindow(ctx, t, step, func() error {
		var first error
		sum = syscalls.Reading{ByName: map[string]uint64{}}
		for _, c := range counters {
			rd, err := c.Read()
			if first == nil {
				first = err
			}
			sum.Total += rd.Total
			for name, n := range rd.ByName {
				sum.ByName[name] += n
			}
		}
		return first
	}, closeAll)
	if err != nil {
		return w, err
	}
	w.Start, w.Seconds = start, sec
	w.Values[metricSyscalls.Name] = float64(sum.Total) / sec
	// Every kind counted by name has a value, 0 when it was not called.
	for name, n := range sum.ByName {
		w.Values["syscall."+name] = float64(n) / sec
	}
	return w, nil
}

// countWindow waits one syscall window with the counters attached, reads
// them, releases them (before the next CPU window: the tax lasts while they
// are attached) and joins the window's load step.
func (r *runner) countWindow(ctx context.Context, t *target, step chan *load.StepResult, read func() error, release func()) (time.Time, float64, error) {
	start := time.Now()
	var err error
	select {
	case <-ctx.Done():
		err = fmt.Errorf("compare: interrupted: %w", ctx.Err())
	case <-time.After(r.cfg.SyscallWindow):
	}
	if rerr := read(); rerr != nil && err == nil {
		err = fmt.Errorf("compare: read syscall counters: %w", rerr)
	}
	sec := time.Since(start).Seconds()
	if r.res.Protocol.Restart {
		// The process is stopped next and a new one warmed up: the
		// counters, detached at once, wait out their grace period (1.35 s
		// for a BPF program) meanwhile. The next CPU window waits for it.
		done := make(chan struct{})
		go func() {
			release()
			close(done)
		}()
		r.releasing = done
	} else {
		release()
	}
	if step != nil {
		res := <-step
		if err == nil {
			err = r.loadFailed(t, res)
		}
	}
	return start, sec, err
}

// counted returns the processes of a tree whose syscalls are counted: all
// but the root shell compare started, which only waits for its child (each
// counted process costs a set of tracepoint events to attach and release).
func (r *runner) counted(tree []int) []int {
	if len(tree) < 2 || r.res.Sides[0].Command == "" {
		return tree
	}
	if p := r.hsnap.Find(int32(tree[0])); p != nil && p.Comm == "sh" {
		return tree[1:]
	}
	return tree
}
