//go:build linux

package syscalls

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
	"golang.org/x/sys/unix"
)

// startSession opens the counting of cfg's target: it starts cfg.Command
// stopped at its exec, or opens the source on cfg.PID.
func startSession(cfg Config, stdout, stderr io.Writer) (*Session, error) {
	r := &Report{PID: cfg.PID, Command: cfg.Command}
	ss := &Session{cfg: cfg, r: r}
	if len(cfg.Command) > 0 {
		cmd, src, done, err := startCommand(cfg, r, stdout, stderr)
		if err != nil {
			return nil, err
		}
		ss.cmd, ss.src, ss.exited = cmd, src, done
	} else {
		r.Comm = comm(cfg.ProcRoot, cfg.PID)
		if r.Comm == "" {
			return nil, fmt.Errorf("process %d %w", cfg.PID, ErrNotFound)
		}
		src, err := open(cfg, cfg.PID, r)
		if err != nil {
			return nil, err
		}
		ss.src, ss.exited = src, watchExit(cfg.PID)
	}
	ss.start = time.Now()
	return ss, nil
}

// comm returns the process's name, or "" when it does not exist.
func comm(root string, pid int) string { return proc.NewFS(root).Comm(pid) }

// watchExit returns a channel closed when pid exits (becomes a zombie or
// disappears), watched through a pidfd.
func watchExit(pid int) <-chan struct{} {
	done := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		close(done)
		return done
	}
	go func() {
		defer unix.Close(fd)
		defer close(done)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n > 0 {
				return
			}
		}
	}()
	return done
}

// open chooses the mechanism for pid, falling back as cfg.Mode allows, and
// fills the header fields of r.
func open(cfg Config, pid int, r *Report) (source, error) {
	if cfg.Mode == "proc" {
		return openProc(cfg, pid, r, "asked for with --mode proc")
	}
	s, err := openExact(cfg, pid, r)
	if err == nil {
		return s, nil
	}
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("process %d %w", pid, ErrNotFound)
	}
	if cfg.Mode == "exact" {
		return nil, err
	}
	// Auto mode degrades to the approximate /proc mode whatever stopped
	// exact counting (privilege, no tracefs, descriptors), and says why.
	why := fmt.Sprintf("exact counting failed (%v)", err)
	switch {
	case errors.Is(err, perf.ErrPermission) && os.Geteuid() != 0:
		why = fmt.Sprintf("exact counting is not allowed (%v); run as root, or give gosleuth CAP_PERFMON and read access to tracefs, for exact per-syscall counts", err)
	case errors.Is(err, perf.ErrNoTracefs):
		why = fmt.Sprintf("exact counting needs tracefs (%v); mount it (mount -t tracefs nodev /sys/kernel/tracing) or run as root, which mounts it", err)
	}
	return openProc(cfg, pid, r, why)
}

// exactSource counts with a Counter.
type exactSource struct {
	counter  *Counter
	follower *perf.Follower
	perTask  bool
	// childrenTotal: per-syscall counters follow threads only; the
	// inherited total covers child processes too.
	childrenTotal bool
	procRoot      string
	sum           []uint64
	lastPoll      time.Time
	later         int
	first         map[int]bool
	sampler       *Sampler // --errors, --latency
}

func openExact(cfg Config, pid int, r *Report) (*exactSource, error) {
	evs, err := SyscallEvents(HostArch)
	if err != nil {
		return nil, err
	}
	if len(cfg.Only) > 0 {
		var keep []Event
		for _, name := range cfg.Only {
			i := slices.IndexFunc(evs, func(e Event) bool { return e.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("count %s: %w", name, ErrUnknownSyscall)
			}
			keep = append(keep, evs[i])
		}
		evs = keep
	}
	tot, totErr := TotalEvent()
	opts := CounterOptions{Events: evs, PerThread: cfg.Threads, FS: proc.NewFS(cfg.ProcRoot)}
	if len(cfg.Only) > 0 && totErr == nil {
		opts.Events = append(opts.Events, tot)
	}
	if cfg.Threads && totErr == nil {
		opts.Total = &tot
	}
	// A running process's children are counted in one inherited total, not
	// per syscall: copying ~360 events into every child at fork slowed a
	// forking target 86x. A command started by gosleuth is counted whole.
	if !cfg.Threads && len(cfg.Command) == 0 && totErr == nil {
		opts.ThreadsOnly, opts.Total = true, &tot
	}
	r.Mode = ModeExact
	c, err := NewCounter(pid, opts)
	if errors.Is(err, ErrTooManyFDs) && totErr == nil {
		r.Notes = append(r.Notes, err.Error()+"; counting only the total of all syscalls, no per-thread counts (raise the hard RLIMIT_NOFILE for a per-syscall table)")
		r.Mode = ModeTotals
		opts = CounterOptions{Events: []Event{tot}, FS: opts.FS}
		c, err = NewCounter(pid, opts)
	}
	if err != nil {
		return nil, err
	}
	s := &exactSource{counter: c, perTask: cfg.Threads && r.Mode == ModeExact, procRoot: cfg.ProcRoot, sum: make([]uint64, len(opts.Events))}
	s.childrenTotal = opts.ThreadsOnly && r.Mode == ModeExact && !c.ChildrenCopied
	switch {
	case r.Mode == ModeTotals:
		r.Mechanism = "perf counters on raw_syscalls:sys_enter, one per thread, inherited by threads and children started later"
	case cfg.Threads:
		r.Mechanism = fmt.Sprintf("perf counters on %d syscalls:sys_enter_* tracepoints per thread, own counts per thread (new threads found every 10 ms), plus an inherited raw_syscalls:sys_enter total", len(evs))
	case s.childrenTotal:
		r.Mechanism = fmt.Sprintf("perf counters on %d syscalls:sys_enter_* tracepoints per thread, inherited by threads started later; child processes counted in one inherited raw_syscalls:sys_enter total", len(evs))
	default:
		r.Mechanism = fmt.Sprintf("perf counters on %d syscalls:sys_enter_* tracepoints per thread, inherited by threads and children started later", len(evs))
		if c.ChildrenCopied {
			r.Notes = append(r.Notes, "this kernel has no inherit_thread (Linux 5.13): every counter is copied into each child process at fork, which slows a forking target")
		}
	}
	if len(cfg.Only) > 0 {
		names := strings.Join(cfg.Only, ",")
		if len(cfg.Only) > 8 {
			names = strings.Join(cfg.Only[:8], ",") + fmt.Sprintf(",... (%d)", len(cfg.Only))
		}
		r.Mechanism += "; only " + names + " named, the rest shown as other"
	}
	r.Threads = c.Attached
	if c.Ambiguous > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d threads started while attaching (%d retries): their calls may be counted twice", c.Ambiguous, c.Retries))
	}
	s.first = map[int]bool{}
	tids, _ := c.listTasks()
	for _, t := range tids {
		s.first[t] = true
	}
	s.follower = perf.NewFollower(cfg.ProcRoot, pid, len(cfg.Command) > 0)
	added, _, _ := s.follower.Poll()
	if cfg.Errors || cfg.Latency {
		if s.sampler, err = NewSampler(cfg.Latency); err == nil {
			err = s.sampler.AddThreads(tidsOf(added))
		}
		if err != nil {
			s.close()
			return nil, err
		}
		what := "failed calls sampled from raw_syscalls:sys_exit"
		if cfg.Latency {
			what = "every call timed from raw_syscalls:sys_enter/sys_exit samples"
		}
		r.Mechanism += fmt.Sprintf("; %s, per thread (threads started later: from when found, polled every 10 ms)", what)
	}
	return s, nil
}

func tidsOf(ts []perf.Task) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.TID
	}
	return out
}

func (s *exactSource) tick(now time.Time) {
	// New threads need events of their own only with --threads, --errors
	// and --latency; otherwise inheritance covers them and the poll only
	// counts them for the header.
	period := 250 * time.Millisecond
	if s.perTask || s.sampler != nil {
		period = 10 * time.Millisecond
	}
	if now.Sub(s.lastPoll) < period {
		return
	}
	s.lastPoll = now
	added, gone, _ := s.follower.Poll()
	var tids []int
	for _, t := range added {
		if !s.first[t.TID] {
			s.later++
			tids = append(tids, t.TID)
		}
	}
	if s.perTask {
		s.counter.AddThreads(tids)
		s.counter.RetireThreads(tidsOf(gone))
	}
	if s.sampler != nil {
		s.sampler.AddThreads(tidsOf(added))
		s.sampler.Poll()
		s.sampler.RetireThreads(tidsOf(gone))
	}
}

func (s *exactSource) report(r *Report, seconds float64) error {
	clear(s.sum)
	total, threads, err := s.counter.Read(s.sum, s.perTask)
	if err != nil {
		return err
	}
	evs := s.counter.Events()
	r.DurationS = seconds
	r.ReadErrors = s.counter.ReadErrors
	r.ThreadsLater = s.later
	var named uint64
	r.Syscalls, named = Rows(evs, s.sum, seconds)
	r.Total = named
	if i := slices.IndexFunc(evs, func(e Event) bool { return e.Raw }); i >= 0 {
		// The total of every syscall was counted: anything the named
		// counters did not see is "other".
		r.Total = s.sum[i]
		if r.Total > named {
			name := "other"
			if len(r.Syscalls) == 0 && r.Mode == ModeTotals {
				name = "all (totals only)"
			}
			r.Syscalls = append(r.Syscalls, Row{Name: name, Nr: -1, Count: r.Total - named})
		}
		finishRows(r.Syscalls, r.Total, seconds)
	}
	if s.childrenTotal && total > r.Total {
		// The inherited total also saw the child processes' calls.
		r.Syscalls = append(r.Syscalls, Row{Name: "(child processes)", Nr: -1, Count: total - r.Total})
		r.Total = total
		finishRows(r.Syscalls, r.Total, seconds)
	}
	if s.perTask {
		r.Total = total
		r.PerThread = r.PerThread[:0]
		var attributed uint64
		for _, th := range threads {
			rows, sum := Rows(evs, th.Counts, seconds)
			attributed += sum
			if sum == 0 {
				continue
			}
			r.PerThread = append(r.PerThread, ThreadRow{TID: th.TID, Comm: proc.NewFS(s.procRoot).ThreadComm(r.PID, th.TID),
				Total: sum, Exited: th.Exited, Syscalls: rows})
		}
		r.Unattributed = 0
		if total > attributed {
			r.Unattributed = total - attributed
		}
		r.Syscalls, _ = Rows(evs, s.sum, seconds)
		if r.Unattributed > 0 {
			// Keep the table's total exact: calls of threads before
			// gosleuth found them are in the inherited total only.
			r.Syscalls = append(r.Syscalls, Row{Name: "unattributed", Nr: -1, Count: r.Unattributed})
		}
		finishRows(r.Syscalls, total, seconds)
	}
	if s.sampler != nil {
		s.sampler.Poll()
		s.addSampled(r)
	}
	return nil
}

// addSampled adds the sampler's errors and latencies to the rows.
func (s *exactSource) addSampled(r *Report) {
	stats := s.sampler.Stats()
	r.Lost = s.sampler.Lost()
	r.Sampled = s.sampler.Threads()
	r.ErrorsByErrno = r.ErrorsByErrno[:0]
	var unseen uint64
	for i := range r.Syscalls {
		row := &r.Syscalls[i]
		var failed uint64
		if st := stats[row.Nr]; st != nil && row.Nr >= 0 {
			for _, n := range st.Failed {
				failed += n
			}
			if st.Latency != nil && st.Calls < row.Count {
				// Records dropped when a ring filled, including those
				// the kernel could not report any more (thread exit).
				unseen += row.Count - st.Calls
			}
			if h := st.Latency; h != nil && h.TotalCount() > 0 {
				row.Latency = &Latency{Calls: uint64(h.TotalCount()), AvgNS: h.Mean(), P99NS: h.ValueAtQuantile(99),
					MaxNS: h.Max(), TotalNS: int64(h.Mean() * float64(h.TotalCount()))}
			}
		}
		if row.Nr >= 0 {
			row.Errors = &failed
		}
	}
	r.Unseen = unseen
	for nr, st := range stats {
		for errno, n := range st.Failed {
			r.ErrorsByErrno = append(r.ErrorsByErrno, ErrnoRow{Name: Name(HostArch, nr), Nr: nr, Errno: ErrnoName(errno), Count: n})
		}
	}
	slices.SortFunc(r.ErrorsByErrno, func(a, b ErrnoRow) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return cmp.Compare(a.Name+a.Errno, b.Name+b.Errno)
	})
}

func (s *exactSource) stop() error { return s.counter.Disable() }

func (s *exactSource) held() (fds, tracepoints int) {
	return s.counter.FDs(), len(s.counter.Events())
}

func (s *exactSource) close() {
	s.closeOthers()
	s.counter.Close()
}

// detach is close with the counters' slow release left to a releaser
// process (Counter.Detach).
func (s *exactSource) detach() {
	s.closeOthers()
	s.counter.Detach()
}

func (s *exactSource) closeOthers() {
	if s.sampler != nil {
		s.sampler.Close()
	}
	if s.follower != nil {
		s.follower.Close()
	}
}

// procSource is the approximate /proc mode.
type procSource struct {
	reader    *proc.Reader
	sampler   *ProcSampler
	first     proc.Snapshot
	snap      proc.Snapshot
	pid       int
	lastScan  time.Time
	lastTick  time.Time
	start     time.Time
	firstRead bool
}

func openProc(cfg Config, pid int, r *Report, why string) (*procSource, error) {
	rd, err := proc.NewReader(proc.Options{Root: cfg.ProcRoot, PIDs: []int{pid}, MaxFDs: 16})
	if err != nil {
		return nil, err
	}
	s := &procSource{reader: rd, sampler: NewProcSampler(cfg.ProcRoot, pid, HostArch), pid: pid, start: time.Now()}
	if err := rd.Snapshot(&s.first); err != nil {
		rd.Close()
		return nil, err
	}
	s.firstRead = true
	s.sampler.Rescan()
	r.Mode = ModeProc
	r.Mechanism = "approximate, from /proc: syscr/syscw of /proc/PID/io and 100 Hz samples of /proc/PID/task/*/syscall"
	r.Reason = why
	r.Threads = s.sampler.Threads()
	noIO := false
	if p := s.first.Find(int32(pid)); p == nil || p.Known&proc.KnownIO == 0 {
		noIO = true
		r.Notes = append(r.Notes, "cannot read /proc/PID/io of this process: read/write counts unknown")
	}
	if s.sampler.Threads() == 0 {
		if noIO {
			// Nothing at all can be measured: an all-zero report would
			// read as a process that makes no syscalls.
			rd.Close()
			return nil, fmt.Errorf("count syscalls of process %d: %w: neither its /proc/PID/io nor its threads' syscall files are readable by this user (run as root or as the process's user)", pid, proc.ErrPermission)
		}
		r.Notes = append(r.Notes, "cannot read /proc/PID/task/*/syscall of this process (needs the same user, or ptrace access): no wait profile")
	}
	return s, nil
}

func (s *procSource) tick(now time.Time) {
	if now.Sub(s.lastScan) >= 250*time.Millisecond {
		s.lastScan = now
		s.sampler.Rescan()
	}
	s.sampler.Sample()
	s.lastTick = now
}

func (s *procSource) report(r *Report, seconds float64) error {
	if err := s.reader.Snapshot(&s.snap); err != nil {
		return err
	}
	a := &Approx{SampleHz: 100}
	if seconds > 0 && s.sampler.Threads() > 0 {
		a.SampleHz = float64(s.sampler.Samples) / float64(max(s.sampler.Threads(), 1)) / seconds
	}
	p0, p1 := s.first.Find(int32(s.pid)), s.snap.Find(int32(s.pid))
	if p0 != nil && p1 != nil {
		var ok bool
		if a.ReadCalls, a.WriteCalls, ok = proc.IOCalls(p0, p1); ok && seconds > 0 {
			a.ReadRate = float64(a.ReadCalls) / seconds
			a.WriteRate = float64(a.WriteCalls) / seconds
		}
	}
	s.sampler.Fill(a)
	r.Approx = a
	r.Total = a.ReadCalls + a.WriteCalls
	r.DurationS = seconds
	return nil
}

func (s *procSource) stop() error { return nil }

func (s *procSource) held() (int, int) { return 0, 0 }

func (s *procSource) close() {
	s.sampler.Close()
	s.reader.Close()
}

// startCommand starts cfg.Command stopped right after its execve (ptrace),
// attaches the source, and lets it run. done is closed once it has been
// waited for.
func startCommand(cfg Config, r *Report, stdout, stderr io.Writer) (*exec.Cmd, source, chan struct{}, error) {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Stdin = cfg.Stdin
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	l, err := proc.StartStopped(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	pid := cmd.Process.Pid
	r.PID = pid
	r.Comm = comm(cfg.ProcRoot, pid)
	src, err := open(cfg, pid, r)
	if err != nil {
		l.Resume()
		cmd.Wait()
		return nil, nil, nil, err
	}
	if err := l.Resume(); err != nil {
		src.close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, nil, fmt.Errorf("let %s run: %w", cfg.Command[0], err)
	}
	r.Notes = append(r.Notes, "counting started right after execve: the execve call itself is not counted")
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	return cmd, src, done, nil
}
