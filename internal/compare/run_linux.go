package compare

import (
	"context"
	"fmt"
	"io"
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
