package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/load"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/window"
	"golang.org/x/sys/unix"
)

// target is one side while the run goes.
type target struct {
	idx  int
	side *Side
	// A started command: its shell's process group.
	cmd     *exec.Cmd
	pgid    int
	done    chan struct{}
	waitErr error
	tail    *tailWriter
	life    int
	started time.Time
	paused  bool
	gc      goruntime.Source
	engine  *load.Engine
}

// runner holds a run's state.
type runner struct {
	cfg     Config
	res     *Result
	targets []*target
	host    *proc.Reader
	hsnap   proc.Snapshot
	cpus    []int
	engines map[string]*load.Engine
	// counting: syscall windows are taken; mech is how they count.
	counting bool
	mech     syscalls.Mechanism
	running  *target // restart mode: the side whose process is up
	// reaper kills the sides' process groups if compare dies before
	// stopping them.
	reaper *reaper
	// releasing, when not nil, is closed once the last syscall window's
	// counters are released (restart mode releases them in the
	// background).
	releasing chan struct{}
	// round numbers the schedule's current round (Window.Round).
	round int
}

// Run compares the sides of cfg. It returns the result so far with an
// error when the run stops early (a target that failed wraps ErrTarget).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	start := time.Now()
	r := &runner{cfg: c, engines: map[string]*load.Engine{}}
	r.res = &Result{Sides: slices.Clone(c.Sides)}
	err := r.run(ctx)
	r.cleanup()
	r.res.Seconds = time.Since(start).Seconds()
	if err != nil {
		r.res.Error = err.Error()
	}
	r.res.finish(r.lookOptions())
	if err == nil && len(r.res.Windows) == 0 {
		err = fmt.Errorf("compare: no window was taken")
	}
	return r.res, err
}

func (r *runner) lookOptions() Options {
	o := r.cfg.Stats
	o.Looks = max(r.res.Protocol.Looks, 1)
	return o
}

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

// setupCPUs decides the CPUs started processes run on.
func (r *runner) setupCPUs(commands bool) error {
	p := &r.res.Protocol
	if !commands {
		p.Pinning = "not changed (running processes): " + r.affinityNote()
		return nil
	}
	cpus := r.cfg.CPUs
	if len(cpus) == 0 {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return fmt.Errorf("compare: read CPU affinity: %w", err)
		}
		for i := range 1024 {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
	}
	r.cpus = cpus
	p.Pinning = fmt.Sprintf("every side on CPUs %s (sched_setaffinity on the thread that forks each command, inherited by all its threads and children)", cpuList(cpus))
	return nil
}

// affinityNote reads the running processes' CPU lists for the report.
func (r *runner) affinityNote() string {
	var parts []string
	for _, s := range r.res.Sides {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(s.PID, &set); err != nil {
			continue
		}
		var cpus []int
		for i := range 1024 {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
		parts = append(parts, fmt.Sprintf("%s on CPUs %s", s.Name, cpuList(cpus)))
	}
	return strings.Join(parts, ", ")
}

func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}

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

// start runs t's command under /bin/sh -c in a process group of its own,
// on the run's CPUs.
func (r *runner) start(ctx context.Context, t *target) error {
	defer r.spent(&r.res.Time.Starting, time.Now())
	r.res.Time.Starts++
	cmd := exec.Command("/bin/sh", "-c", t.side.Command)
	cmd.Env = append(os.Environ(), t.side.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.tail = &tailWriter{max: 4096}
	var out io.Writer = io.Discard
	if r.cfg.Output != nil {
		out = r.cfg.Output
	}
	cmd.Stdout = out
	cmd.Stderr = io.MultiWriter(out, t.tail)
	if err := startPinned(cmd, r.cpus); err != nil {
		return fmt.Errorf("compare: side %s: start %q: %w", t.side.Name, t.side.Command, err)
	}
	t.cmd, t.pgid, t.started = cmd, cmd.Process.Pid, time.Now()
	r.reaper.add(t.pgid)
	t.done = make(chan struct{})
	t.life++
	t.side.Lives++
	go func() {
		t.waitErr = cmd.Wait()
		close(t.done)
	}()
	t.paused = false
	if t.side.URL != "" {
		if err := r.waitReady(ctx, t); err != nil {
			return err
		}
	}
	// Let the program start before asking it for a runtime source.
	select {
	case <-t.done:
		return r.exited(t)
	case <-time.After(min(200*time.Millisecond, r.cfg.Warmup)):
	}
	r.connectGC(ctx, t)
	return nil
}

// startPinned starts cmd from a thread whose affinity is cpus, so the
// child inherits it at fork, then restores the thread.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("read affinity: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin to CPUs %s: %w", cpuList(cpus), err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = fmt.Errorf("restore affinity: %w", rerr)
	}
	return err
}

// exited describes an early exit of t's command.
func (r *runner) exited(t *target) error {
	what := "exited"
	if t.waitErr != nil {
		what = "exited with " + t.waitErr.Error()
	}
	var last string
	if l := t.tail.lastLine(); l != "" {
		last = ": " + l
	}
	return fmt.Errorf("compare: %w: side %s's command %s after %.1fs%s", ErrTarget, t.side.Name, what, time.Since(t.started).Seconds(), last)
}

// waitReady waits until t's load URL accepts TCP connections.
func (r *runner) waitReady(ctx context.Context, t *target) error {
	u, _ := url.Parse(t.side.URL)
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	end := time.Now().Add(r.cfg.ReadyTimeout)
	for {
		if t.done != nil {
			select {
			case <-t.done:
				return r.exited(t)
			default:
			}
		}
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("compare: %w: side %s: %s refuses connections after %s: %v", ErrTarget, t.side.Name, addr, r.cfg.ReadyTimeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("compare: interrupted: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// connectGC looks for a runtime source of t's Go process.
func (r *runner) connectGC(ctx context.Context, t *target) {
	if t.gc != nil {
		t.gc.Close()
		t.gc = nil
	}
	var murl string
	if t.idx < len(r.cfg.MetricsURLs) {
		murl = r.cfg.MetricsURLs[t.idx]
	}
	pid := r.goPID(t)
	if pid == 0 && murl == "" {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	src, _, err := goruntime.Connect(cctx, pid, goruntime.Options{ProcRoot: r.cfg.ProcRoot, MetricsURL: murl})
	if err == nil {
		t.gc = src
	}
}

// goPID returns the first Go process of t's tree (0: none).
func (r *runner) goPID(t *target) int {
	tree, err := r.tree(t)
	if err != nil {
		return 0
	}
	for _, pid := range tree {
		if p := r.hsnap.Find(int32(pid)); p != nil && p.GoVersion != "" {
			return pid
		}
	}
	return 0
}

// root is the PID whose tree is measured.
func (t *target) root() int {
	if t.cmd != nil {
		return t.pgid
	}
	return t.side.PID
}

// tree lists t's root process and its descendants, from a fresh reading
// of the host.
func (r *runner) tree(t *target) ([]int, error) {
	if err := r.host.Snapshot(&r.hsnap); err != nil {
		return nil, fmt.Errorf("compare: read processes: %w", err)
	}
	root := int32(t.root())
	if r.hsnap.Find(root) == nil {
		return nil, r.gone(t)
	}
	in := map[int32]bool{root: true}
	for changed := true; changed; {
		changed = false
		for i := range r.hsnap.Procs {
			p := &r.hsnap.Procs[i]
			if !in[p.PID] && in[p.PPID] {
				in[p.PID] = true
				changed = true
			}
		}
	}
	out := []int{int(root)}
	for pid := range in {
		if pid != root {
			out = append(out, int(pid))
		}
	}
	slices.Sort(out[1:])
	return out, nil
}

// gone describes a target that is no longer there.
func (r *runner) gone(t *target) error {
	if t.cmd != nil {
		select {
		case <-t.done:
			return r.exited(t)
		case <-time.After(100 * time.Millisecond):
		}
		return fmt.Errorf("compare: %w: side %s's shell (PID %d) is gone", ErrTarget, t.side.Name, t.pgid)
	}
	return fmt.Errorf("compare: %w: side %s: process %d died", ErrTarget, t.side.Name, t.side.PID)
}

// activate makes t the side that runs: in restart mode a fresh process is
// started for the window and warmed up, with kept processes t's is resumed
// after a pause. It settles before returning.
//
// Restarting for every window, not for every run of windows of a side,
// keeps the pairs of the schedule independent: in ABBA with one process
// for BB, both of the block's pairs held that one process, and its own
// level (a periodic program's phase against the kernel's tick) moved both
// pairs' signs together. An AA campaign restarted per run of windows
// called CPU "better" in 1 of its first 3 runs, with B's process of the
// block's middle in both pairs.
func (r *runner) activate(ctx context.Context, t *target) error {
	if t.cmd == nil && t.side.Command == "" {
		return nil
	}
	if r.res.Protocol.Restart {
		if r.running != nil {
			r.stop(r.running)
		}
		r.running = t
		if err := r.start(ctx, t); err != nil {
			return err
		}
		return r.warm(ctx, t, r.cfg.Warmup)
	}
	if !t.paused {
		return nil
	}
	for _, o := range r.targets {
		if o != t && !o.paused && o.cmd != nil {
			if err := r.pause(o); err != nil {
				return err
			}
		}
	}
	if err := r.signal(t, unix.SIGCONT); err != nil {
		return err
	}
	t.paused = false
	return r.warm(ctx, t, settle(r.cfg.Window))
}

// settle is how long a resumed process runs before it is measured: its
// timers fire late after SIGCONT.
func settle(window time.Duration) time.Duration {
	return min(max(window/10, 50*time.Millisecond), time.Second)
}

func (r *runner) pause(t *target) error {
	if t.cmd == nil || t.paused {
		return nil
	}
	if err := r.signal(t, unix.SIGSTOP); err != nil {
		return err
	}
	t.paused = true
	return nil
}

func (r *runner) signal(t *target, sig unix.Signal) error {
	select {
	case <-t.done:
		return r.exited(t)
	default:
	}
	if err := unix.Kill(-t.pgid, sig); err != nil {
		return fmt.Errorf("compare: signal side %s's process group %d: %w", t.side.Name, t.pgid, err)
	}
	return nil
}

// stop ends t's process group: SIGCONT (a paused group would not see
// SIGTERM), SIGTERM, and SIGKILL after 2 s.
func (r *runner) stop(t *target) {
	if t.cmd == nil {
		return
	}
	select {
	case <-t.done:
	default:
		unix.Kill(-t.pgid, unix.SIGCONT)
		unix.Kill(-t.pgid, unix.SIGTERM)
		select {
		case <-t.done:
		case <-time.After(2 * time.Second):
			unix.Kill(-t.pgid, unix.SIGKILL)
			<-t.done
		}
	}
	// Children that left the group's shell behind.
	unix.Kill(-t.pgid, unix.SIGKILL)
	r.reaper.remove(t.pgid)
	t.cmd = nil
	t.paused = false
	if t.gc != nil {
		t.gc.Close()
		t.gc = nil
	}
}

func (r *runner) cleanup() {
	r.released()
	for _, t := range r.targets {
		r.stop(t)
		if t.gc != nil {
			t.gc.Close()
		}
	}
	for _, e := range r.engines {
		e.Close()
	}
	if r.host != nil {
		r.host.Close()
	}
	r.reaper.close()
}

// released waits until the last syscall window's counters are released;
// the wait counts as syscall-window time.
func (r *runner) released() {
	if r.releasing == nil {
		return
	}
	defer r.spent(&r.res.Time.SyscallWindows, time.Now())
	<-r.releasing
	r.releasing = nil
}

// warm runs t (under its load) for d without measuring.
func (r *runner) warm(ctx context.Context, t *target, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	defer r.spent(&r.res.Time.Warmup, time.Now())
	if t.side.URL != "" {
		e, err := r.engine(t)
		if err != nil {
			return err
		}
		res := e.Step(ctx, "warm-up "+t.side.Name, r.cfg.Rate, d)
		if err := r.loadFailed(t, res); err != nil {
			return err
		}
	} else {
		select {
		case <-ctx.Done():
			return fmt.Errorf("compare: interrupted: %w", ctx.Err())
		case <-time.After(d):
		}
	}
	if t.cmd != nil {
		select {
		case <-t.done:
			return r.exited(t)
		default:
		}
	}
	return nil
}

// loadTick is the engine's tick: the first tick of every step is its
// warm-up (the pacer starting again), so it is kept short.
func (r *runner) loadTick() time.Duration {
	return min(max(r.cfg.Window/20, 10*time.Millisecond), 100*time.Millisecond)
}

func (r *runner) engine(t *target) (*load.Engine, error) {
	if e := r.engines[t.side.URL]; e != nil {
		return e, nil
	}
	u, err := load.ParseURL(t.side.URL)
	if err != nil {
		return nil, fmt.Errorf("compare: %w: %w", ErrBadInput, err)
	}
	e, err := load.NewEngine(load.Config{URL: u, Connections: r.cfg.Connections, Tick: r.loadTick(), Warmup: r.loadTick(), MaxLag: r.cfg.MaxLag})
	if err != nil {
		return nil, fmt.Errorf("compare: start the load: %w", err)
	}
	r.engines[t.side.URL] = e
	return e, nil
}

// loadFailed turns a step whose connections were refused into an error.
func (r *runner) loadFailed(t *target, res *load.StepResult) error {
	if n := res.ErrorKinds["refused"]; n > 0 && n*2 >= res.Requests {
		return fmt.Errorf("compare: %w: side %s: %s refused %d of %d requests", ErrTarget, t.side.Name, t.side.URL, n, res.Requests)
	}
	return nil
}

// cpuWindow measures t for one window.
func (r *runner) cpuWindow(ctx context.Context, t *target) (Window, error) {
	w := Window{Index: len(r.res.Windows), Side: t.idx, Kind: kindCPU, Life: max(t.life, 1), Values: map[string]float64{}}
	tree, err := r.tree(t)
	if err != nil {
		return w, err
	}
	step, err := r.startLoad(ctx, t, t.side.Name, r.cfg.Window)
	if err != nil {
		return w, err
	}
	var g0 *goruntime.Sample
	if t.gc != nil {
		g0 = readGC(ctx, t.gc)
	}
	// The generator's own CPU over the same interval, a covariate of the
	// sides' (loadCPUKey): this process's less the sampler's. The sampler
	// reads every thread of the side, so its cost follows the side's
	// thread count, which the covariate must not; locked to its thread for
	// the window, its cost is that thread's CPU clock.
	runtime.LockOSThread()
	gen0, own0 := processCPU(), threadCPU()
	m, err := r.measure(ctx, t, tree, r.cfg.Window)
	gen1, own1 := processCPU(), threadCPU()
	runtime.UnlockOSThread()
	gen1 -= own1 - own0
	if step != nil {
		res := <-step
		if err == nil {
			err = r.loadFailed(t, res)
		}
		if err == nil {
			r.applyLoad(&w, res, m)
		}
	}
	if err != nil {
		return w, err
	}
	w.Start, w.Seconds = m.start, m.seconds
	for k, v := range m.values {
		w.Values[k] = v
	}
	if step != nil && gen1 > gen0 {
		w.Values[loadCPUKey] = 100 * (gen1 - gen0).Seconds() / m.seconds
	}
	if g0 != nil {
		if g1 := readGC(ctx, t.gc); g1 != nil {
			gw := goruntime.NewWindow(g0, g1)
			if gw.Known.Has(goruntime.KnownGCCycles) {
				w.Values[metricGC.Name] = gw.GCCyclesPerSec
			}
			if !math.IsNaN(gw.GCCPUShare) {
				w.Values[metricGCShare.Name] = 100 * gw.GCCPUShare
			}
		}
	}
	return w, nil
}

// startLoad starts a load step on t's URL covering a window of d and
// returns when the step's first tick, its warm-up (the pacer starting
// again), is over; the channel gives the step's result. Without load it
// returns nil.
func (r *runner) startLoad(ctx context.Context, t *target, phase string, d time.Duration) (chan *load.StepResult, error) {
	if t.side.URL == "" {
		return nil, nil
	}
	e, err := r.engine(t)
	if err != nil {
		return nil, err
	}
	step := make(chan *load.StepResult, 1)
	tick := r.loadTick()
	go func() { step <- e.Step(ctx, phase, r.cfg.Rate, tick+d) }()
	time.Sleep(tick)
	return step, nil
}

// applyLoad adds the load's latency to w, or drops w when the load missed
// its rate.
func (r *runner) applyLoad(w *Window, res *load.StepResult, m measured) {
	w.Requests, w.AchievedRate = res.Requests, res.AchievedRate
	rate := r.cfg.Rate
	switch {
	case !res.Valid:
		w.Dropped, w.Why = true, strings.Join(res.Invalid, "; ")
	case res.Seconds > 0 && math.Abs(res.AchievedRate-rate)*res.Seconds > 0.005*rate*res.Seconds+2:
		w.Dropped, w.Why = true, fmt.Sprintf("achieved %.1f%% of the target rate (a window counts within 0.5%%)", 100*res.AchievedRate/rate)
	case res.Requests > 0 && float64(res.Errors) > 0.01*float64(res.Requests):
		w.Dropped, w.Why = true, fmt.Sprintf("%d errors in %d requests", res.Errors, res.Requests)
	}
	w.Values[metricP50.Name] = res.Latency.P50
	w.Values[metricP99.Name] = res.Latency.P99
	w.Values[metricP999.Name] = res.Latency.P999
	if res.Requests > 0 {
		// CPU-milliseconds per 1,000 requests over the same interval.
		cpuMS := m.values[metricCPU.Name] / 100 * m.seconds * 1e3
		reqs := res.AchievedRate * m.seconds
		if reqs > 0 {
			w.Values[metricCPUPerK.Name] = cpuMS / (reqs / 1e3)
		}
	}
}

func readGC(ctx context.Context, src goruntime.Source) *goruntime.Sample {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := src.Read(cctx)
	if err != nil {
		return nil
	}
	return s
}

// measured is what one CPU window read from /proc.
type measured struct {
	start   time.Time
	seconds float64
	values  map[string]float64
}

// measure reads t's process tree every tick for d through a
// window.Builder, which subtracts the readings: CPU from the threads'
// schedstat run time (nanoseconds, merged by thread ID) plus the children
// reaped, split into user and system by the clock-tick counters; switches
// merged by thread (so threads that exit in the window keep what they
// did); and here the largest thread count and RSS of the tree seen.
func (r *runner) measure(ctx context.Context, t *target, tree []int, d time.Duration) (measured, error) {
	rd, err := proc.NewReader(proc.Options{Root: r.cfg.ProcRoot, PIDs: tree})
	if err != nil {
		return measured{}, fmt.Errorf("compare: watch side %s: %w", t.side.Name, err)
	}
	defer rd.Close()
	wb := window.NewBuilder(rd, window.Config{PIDs: tree, ProcRoot: r.cfg.ProcRoot, NoFacts: true, NoSeries: true})
	root := int32(tree[0])
	var threads, rss float64
	read := func() (*proc.Snapshot, error) {
		s, err := wb.Read()
		if err != nil {
			return nil, fmt.Errorf("compare: read side %s: %w", t.side.Name, err)
		}
		if s.Find(root) == nil {
			return nil, r.gone(t)
		}
		var th, mem float64
		for i := range s.Procs {
			th += float64(s.Procs[i].Threads)
			mem += float64(s.Procs[i].RSSBytes)
		}
		threads, rss = max(threads, th), max(rss, mem)
		return s, nil
	}
	first, err := read()
	if err != nil {
		return measured{}, err
	}
	start := first.Time
	tick := min(max(d/10, 20*time.Millisecond), 500*time.Millisecond)
	end := start.Add(d)
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		next := min(time.Until(end), tick)
		timer.Reset(max(next, 0))
		var done <-chan struct{}
		if t.cmd != nil {
			done = t.done
		}
		select {
		case <-ctx.Done():
			return measured{}, fmt.Errorf("compare: interrupted: %w", ctx.Err())
		case <-done:
			return measured{}, r.exited(t)
		case <-timer.C:
		}
		if _, err := read(); err != nil {
			return measured{}, err
		}
		if !time.Now().Before(end) {
			break
		}
	}
	sec := wb.Latest().Time.Sub(start).Seconds()
	var cpuS, userS, sysS, vol, invol float64
	for _, w := range wb.Windows(0) {
		cpuS += w.CPUSec() + w.ChildUserSec + w.ChildSysSec
		userS += w.TickUserSec
		sysS += w.TickSysSec
		vol += float64(w.VolCtxsw)
		invol += float64(w.InvolCtxsw)
	}
	m := measured{start: start, seconds: sec, values: map[string]float64{}}
	m.values[metricCPU.Name] = 100 * cpuS / sec
	// The tick counters are coarse (the kernel charges a whole 10 ms tick
	// to user or system by where it lands) but their ratio splits the
	// precise total. Below 50 ticks in the window the split is mostly
	// rounding and is left out rather than guessed.
	if ticks := userS + sysS; ticks >= 50.0/proc.ClockTicks {
		m.values[metricUser.Name] = 100 * cpuS * userS / ticks / sec
		m.values[metricSys.Name] = 100 * cpuS * sysS / ticks / sec
	}
	m.values[metricWakeups.Name] = vol / sec
	m.values[metricInvol.Name] = invol / sec
	m.values[metricThreads.Name] = threads
	m.values[metricRSS.Name] = rss / (1 << 20)
	return m, nil
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

// tailWriter keeps the last bytes written to it (a command's stderr).
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

// lastLine returns the last non-empty line written, at most 200 bytes.
func (t *tailWriter) lastLine() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 200 {
		last = last[:200]
	}
	return last
}

// processCPU is the CPU time this process has used, all threads, to the
// nanosecond (CLOCK_PROCESS_CPUTIME_ID: the scheduler's run time, not
// clock ticks); 0 where the clock cannot be read.
func processCPU() time.Duration { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID);
// the caller locks its goroutine to the thread.
func threadCPU() time.Duration { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

func cpuClock(id int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
