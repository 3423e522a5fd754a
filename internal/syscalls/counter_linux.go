//go:build linux

package syscalls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
	"golang.org/x/sys/unix"
)

// ErrTooManyFDs reports that counting every syscall of every thread needs
// more file descriptors than RLIMIT_NOFILE allows.
var ErrTooManyFDs = errors.New("not enough file descriptors for one counter per syscall and thread")

// SyscallEvents lists the kernel's syscalls:sys_enter_* tracepoints with
// their perf ids, named with the table for a (tracepoint names the table
// does not know keep the tracepoint's spelling and Nr -1).
func SyscallEvents(a Arch) ([]Event, error) { return SyscallEventsNamed(a, nil) }

// SyscallEventsNamed is SyscallEvents for the syscalls named in keep only
// (all with keep nil): a tracepoint's id is a tracefs file to read, and
// reading the ~360 of them costs some 10 ms where a view counts a few
// dozen.
func SyscallEventsNamed(a Arch, keep []string) ([]Event, error) {
	tps, err := perf.Tracepoints("syscalls", "sys_enter_")
	if err != nil {
		return nil, err
	}
	evs := make([]Event, 0, len(tps))
	for _, tp := range tps {
		name := strings.TrimPrefix(tp, "sys_enter_")
		nr, ok := Number(a, name)
		if ok {
			name = Name(a, nr)
		}
		if keep != nil && !slices.Contains(keep, name) {
			continue
		}
		id, err := perf.TracepointID("syscalls", tp)
		if err != nil {
			return nil, err
		}
		evs = append(evs, Event{Name: name, Nr: nr, ID: id})
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("list syscalls:sys_enter_* tracepoints: none found")
	}
	return evs, nil
}

// TotalEvent returns the raw_syscalls:sys_enter tracepoint, which fires for
// every syscall.
func TotalEvent() (Event, error) {
	id, err := perf.TracepointID("raw_syscalls", "sys_enter")
	if err != nil {
		return Event{}, err
	}
	return Event{Name: "all", Nr: -1, ID: id, Raw: true}, nil
}

// CounterOptions configures a Counter.
type CounterOptions struct {
	// Events are the tracepoints to count on every thread (see
	// SyscallEvents and TotalEvent).
	Events []Event
	// PerThread opens events without inheritance so each thread's counts
	// are its own; new threads must then be added with AddThreads, and
	// Total, when set, is counted with inheritance on the threads present at
	// attach so the process total stays exact.
	PerThread bool
	// ThreadsOnly makes the inherited events follow new threads only,
	// never child processes (inherit_thread, Linux 5.13): the kernel copies
	// every inherited event into each child at fork, and with ~360 events
	// a forking target slowed 86x. Total, when set, is then inherited by
	// children too (one event per fork), so their calls count in the total.
	ThreadsOnly bool
	// Total is the event counted for the exact total with PerThread or
	// ThreadsOnly.
	Total *Event
	// FS is the procfs the target's threads are listed from (the zero FS
	// is /proc).
	FS proc.FS
	// Attempts bounds how often the attach is redone when a thread appears
	// during it (0 means 3).
	Attempts int
}

// Counter counts the syscalls of one process with per-task counting perf
// events on syscall tracepoints, one group per thread, as "perf stat -e
// 'syscalls:sys_enter_*'" does. Without PerThread the events are inherited:
// the kernel copies them to every thread and child process the target
// starts after attach, and reading a thread's group includes those
// copies, so the sum over the groups is the process's exact count, including
// threads and children that have exited. Events only fire for the tasks
// they are attached to: other processes pay only the kernel's syscall
// tracepoint slow path.
//
// Every descriptor is close-on-exec and owned by the Counter, and a
// releaser process (see release_linux.go) holds a second reference to
// each from attach on: when this process ends without Detach or Close,
// even by SIGKILL, the releaser disables the events at once and then
// releases them, so the target stops being counted within milliseconds
// while the kernel's release takes its seconds.
type Counter struct {
	opts   CounterOptions
	pid    int
	groups []*group
	totals []int // inherited Total counters (PerThread or ThreadsOnly)
	// rel is the releaser that holds every event with this process (nil
	// or failed when none could start or it stopped answering: the
	// events then go with this process, as its exit releases them).
	rel     *releaserConn
	relErr  error // why rel is nil, for tests
	fds     int
	grouped bool // PERF_FORMAT_GROUP reads work
	buf     []byte
	retired []uint64 // counts of closed per-thread groups, by event
	// Attached is the number of threads the events were opened on at
	// attach, Retries how often the attach was redone because a thread
	// appeared meanwhile, and Ambiguous how many threads appeared during
	// the last attempt and were opened directly though they may have
	// inherited events too (their calls may then count twice).
	Attached, Retries, Ambiguous int
	// ChildrenCopied is set when ThreadsOnly was asked for and the kernel
	// lacks inherit_thread: every event is copied into child processes.
	ChildrenCopied bool
	// ReadErrors counts group reads that failed even when retried
	// (LastReadError is the last); those groups kept their last counts.
	ReadErrors    int
	LastReadError error
}

// group is the events of one thread.
type group struct {
	tid   int
	fds   []int
	last  []uint64
	final bool // thread gone, last holds its final counts
	held  int  // the releaser's number of fds[0], -1 when it holds none
}

// NewCounter attaches to every thread of pid. It raises RLIMIT_NOFILE to
// the hard limit and returns an error wrapping ErrTooManyFDs when that is
// not enough for len(Events) descriptors per thread, perf.ErrPermission when
// the kernel refuses, and unix.ESRCH when the process is gone. Counting
// starts when NewCounter returns.
func NewCounter(pid int, opts CounterOptions) (*Counter, error) {
	if len(opts.Events) == 0 {
		return nil, errors.New("new syscall counter: no events")
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 3
	}
	c := &Counter{opts: opts, pid: pid, grouped: true, retired: make([]uint64, len(opts.Events))}
	limit, err := perf.RaiseFDLimit()
	if err != nil {
		return nil, err
	}
	// Started first, so its start overlaps with opening the events.
	c.rel, c.relErr = startReleaser()
	for attempt := 0; ; attempt++ {
		tids, err := c.listTasks()
		if err != nil {
			c.Close()
			return nil, err
		}
		perThread := len(opts.Events)
		if (opts.PerThread || opts.ThreadsOnly) && opts.Total != nil {
			perThread++
		}
		if need, have := len(tids)*perThread, fdBudget(limit); need > have {
			c.Close()
			return nil, fmt.Errorf("count syscalls of %d threads: need %d descriptors, %d available under RLIMIT_NOFILE %d: %w",
				len(tids), need, have, limit, ErrTooManyFDs)
		}
		if err := c.openAll(tids); err != nil {
			c.Close()
			return nil, err
		}
		after, err := c.listTasks()
		if err != nil {
			c.Close()
			return nil, err
		}
		added := newTIDs(tids, after)
		if len(added) == 0 {
			break
		}
		// A thread started while the events were being opened: if its
		// creator already had them it inherited a copy, else it has none,
		// and which is true cannot be told from outside. Nothing has
		// counted yet (all disabled), so start again.
		if attempt+1 < opts.Attempts && !opts.PerThread {
			if c.rel.usable() {
				// Earlier attempts' events were dropped already.
				c.rel.drop(c.rel.dropped, c.rel.held-c.rel.dropped)
			}
			c.closeAll()
			c.Retries++
			continue
		}
		if err := c.openAll(added); err != nil {
			c.Close()
			return nil, err
		}
		if !opts.PerThread {
			c.Ambiguous = len(added)
		}
		break
	}
	c.Attached = len(c.groups)
	if err := c.enable(); err != nil {
		c.Close()
		return nil, err
	}
	c.buf = make([]byte, 8+8*len(opts.Events))
	return c, nil
}

// fdBudget is how many more descriptors this process may open, keeping a
// margin for everything else it does.
func fdBudget(limit uint64) int {
	open := max(proc.NewFS("").SelfFDs(), 0)
	return max(0, int(limit)-open-64)
}

func (c *Counter) listTasks() ([]int, error) {
	tids, err := c.opts.FS.TaskIDs(c.pid)
	if errors.Is(err, proc.ErrProcessGone) {
		return nil, fmt.Errorf("list threads of %d: %w", c.pid, unix.ESRCH)
	}
	return tids, err
}

// newTIDs returns the TIDs in after that are not in before.
func newTIDs(before, after []int) []int {
	var out []int
	for _, t := range after {
		if !slices.Contains(before, t) {
			out = append(out, t)
		}
	}
	return out
}

// perfBitInheritThread is perf_event_attr.inherit_thread (bit 35, Linux
// 5.13), which x/sys/unix does not name.
const perfBitInheritThread = 1 << 35

func (c *Counter) attr(ev Event, leader, inherit bool) unix.PerfEventAttr {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_TRACEPOINT,
		Config: ev.ID,
	}
	if !ev.Raw {
		// syscalls:* tracepoints carry the user registers, so excluding
		// the kernel loses nothing and lets unprivileged users (paranoid
		// 2) count their own processes. raw_syscalls:* carry kernel
		// registers: excluding the kernel would count nothing.
		attr.Bits = unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	}
	if leader {
		attr.Bits |= unix.PerfBitDisabled
	}
	if inherit {
		attr.Bits |= unix.PerfBitInherit
		if c.opts.ThreadsOnly {
			attr.Bits |= perfBitInheritThread
		}
	}
	if c.grouped {
		attr.Read_format = unix.PERF_FORMAT_GROUP
	}
	return attr
}

// openAll opens a disabled group on each thread; threads that have gone
// meanwhile are skipped.
func (c *Counter) openAll(tids []int) error {
	for _, tid := range tids {
		g, err := c.openGroup(tid, !c.opts.PerThread)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return err
		}
		c.groups = append(c.groups, g)
		c.hold(g)
		if (c.opts.PerThread || c.opts.ThreadsOnly) && c.opts.Total != nil && c.Attached == 0 {
			attr := c.attr(*c.opts.Total, true, true)
			attr.Bits &^= perfBitInheritThread // the total follows children too
			attr.Read_format = 0
			fd, err := perf.OpenTask(&attr, tid, -1)
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			if err != nil {
				return err
			}
			c.totals = append(c.totals, fd)
			c.fds++
			c.holdTotal(fd)
		}
	}
	return nil
}

func (c *Counter) openGroup(tid int, inherit bool) (*group, error) {
	g := &group{tid: tid, fds: make([]int, 0, len(c.opts.Events)), last: make([]uint64, len(c.opts.Events)), held: -1}
	for i, ev := range c.opts.Events {
		leader := -1
		if c.grouped && i > 0 {
			leader = g.fds[0]
		}
		attr := c.attr(ev, i == 0 || !c.grouped, inherit)
		fd, err := perf.OpenTask(&attr, tid, leader)
		if err != nil && i == 0 && c.opts.ThreadsOnly && errors.Is(err, unix.EINVAL) {
			// A kernel before 5.13 has no inherit_thread: inherit into
			// children too, as before, and say so (ChildrenCopied).
			c.closeGroup(g)
			c.opts.ThreadsOnly = false
			c.ChildrenCopied = true
			return c.openGroup(tid, inherit)
		}
		if err != nil && i <= 1 && c.grouped && errors.Is(err, unix.EINVAL) {
			// This kernel refuses the group with these bits: read each
			// counter on its own.
			c.closeGroup(g)
			c.grouped = false
			return c.openGroup(tid, inherit)
		}
		if err != nil {
			c.closeGroup(g)
			return nil, fmt.Errorf("count %s: %w", ev.Name, err)
		}
		g.fds = append(g.fds, fd)
		c.fds++
	}
	return g, nil
}

func (c *Counter) enable() error {
	for _, g := range c.groups {
		if err := c.enableGroup(g); err != nil {
			return err
		}
	}
	for _, fd := range c.totals {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enable total counter: %w", err)
		}
	}
	return nil
}

func (c *Counter) enableGroup(g *group) error {
	fds := g.fds
	if c.grouped {
		fds = fds[:1]
	}
	for _, fd := range fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("enable counters of thread %d: %w", g.tid, err)
		}
	}
	return nil
}

// Disable stops every counter (and its inherited copies) at once, so the
// target stops paying for them before the slow release in Close; counts
// stay readable.
func (c *Counter) Disable() error {
	for _, g := range c.groups {
		if g.final {
			continue
		}
		fds := g.fds
		if c.grouped {
			fds = fds[:1]
		}
		for _, fd := range fds {
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
				return fmt.Errorf("disable counters of thread %d: %w", g.tid, err)
			}
		}
	}
	for _, fd := range c.totals {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
			return fmt.Errorf("disable total counter: %w", err)
		}
	}
	return nil
}

// AddThreads opens counters on threads found after attach (PerThread
// mode, where events are not inherited). Threads that have gone are
// skipped.
func (c *Counter) AddThreads(tids []int) error {
	for _, tid := range tids {
		if c.has(tid) {
			continue
		}
		g, err := c.openGroup(tid, false)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return err
		}
		c.groups = append(c.groups, g)
		c.hold(g)
		if err := c.enableGroup(g); err != nil {
			return err
		}
	}
	return nil
}

func (c *Counter) has(tid int) bool {
	for _, g := range c.groups {
		if g.tid == tid && !g.final {
			return true
		}
	}
	return false
}

// RetireThreads reads the final counts of threads that have exited and
// closes their counters (PerThread mode only: inherited counters must stay
// open, they carry the counts of the threads started from them).
func (c *Counter) RetireThreads(tids []int) {
	if !c.opts.PerThread {
		return
	}
	for _, g := range c.groups {
		if g.final || !slices.Contains(tids, g.tid) {
			continue
		}
		c.readRetry(g)
		if c.rel.usable() && g.held >= 0 {
			c.rel.drop(g.held, len(g.fds))
		}
		c.closeGroup(g)
		g.final = true
	}
}

// FDs returns the number of perf descriptors open.
func (c *Counter) FDs() int { return c.fds }

// Events returns the counted events, in the order of every count slice.
func (c *Counter) Events() []Event { return c.opts.Events }

// ThreadCounts is one thread's counts, indexed like Events.
type ThreadCounts struct {
	TID    int
	Counts []uint64
	Exited bool
}

// Read adds the cumulative count of each event, over all threads, to
// sum (len(Events) long), returns the exact process total when PerThread
// counts one (else 0), and, with perThread, each thread's own counts.
func (c *Counter) Read(sum []uint64, perThread bool) (total uint64, threads []ThreadCounts, err error) {
	for _, g := range c.groups {
		if !g.final {
			c.readRetry(g)
		}
		for i, v := range g.last {
			sum[i] += v
		}
		if perThread {
			threads = append(threads, ThreadCounts{TID: g.tid, Counts: slices.Clone(g.last), Exited: g.final})
		}
	}
	var b [8]byte
	for _, fd := range c.totals {
		if _, err := unix.Read(fd, b[:]); err != nil {
			return 0, nil, fmt.Errorf("read total syscall counter: %w", err)
		}
		total += binary.NativeEndian.Uint64(b[:])
	}
	return total, threads, nil
}

// readTries is how many times readRetry reads a group before it gives up.
// The waits between tries double from 1 ms, so the last try comes 127 ms
// after the first: a read racing with the exit of the thread or of its
// inherited copies has been seen to fail with ECHILD for a few
// milliseconds on a loaded machine, never for longer.
const readTries = 8

// readRetry reads a group, retrying a failed read with a doubling backoff
// (see readTries); if it keeps failing, the group keeps its last counts and
// ReadErrors and LastReadError say so.
func (c *Counter) readRetry(g *group) {
	wait := time.Millisecond
	for try := 1; ; try++ {
		err := c.readGroup(g)
		if err == nil {
			return
		}
		if try == readTries {
			c.ReadErrors++
			c.LastReadError = err
			return
		}
		time.Sleep(wait)
		wait *= 2
	}
}

func (c *Counter) readGroup(g *group) error {
	if c.grouped {
		n, err := unix.Read(g.fds[0], c.buf)
		if err != nil {
			return fmt.Errorf("read syscall counters of thread %d: %w", g.tid, err)
		}
		if n < 8 || int(binary.NativeEndian.Uint64(c.buf))*8+8 > n || int(binary.NativeEndian.Uint64(c.buf)) != len(g.last) {
			return fmt.Errorf("read syscall counters of thread %d: short group read (%d bytes)", g.tid, n)
		}
		for i := range g.last {
			g.last[i] = binary.NativeEndian.Uint64(c.buf[8+8*i:])
		}
		return nil
	}
	var b [8]byte
	for i, fd := range g.fds {
		if _, err := unix.Read(fd, b[:]); err != nil {
			return fmt.Errorf("read syscall counter of thread %d: %w", g.tid, err)
		}
		g.last[i] = binary.NativeEndian.Uint64(b[:])
	}
	return nil
}

func (c *Counter) closeGroup(g *group) {
	for _, fd := range g.fds {
		unix.Close(fd)
	}
	c.fds -= len(g.fds)
	g.fds = nil
}

func (c *Counter) closeAll() {
	// The last close of a tracepoint's events waits for an RCU grace
	// period (tracepoint_synchronize_unregister) under the kernel's
	// event_mutex, so closing 360 tracepoints one after another takes
	// seconds. Closing them from many threads lets grace periods overlap.
	var fds []int
	for _, g := range c.groups {
		fds = append(fds, g.fds...)
		c.fds -= len(g.fds)
		g.fds = nil
	}
	closeParallel(fds)
	c.groups = c.groups[:0]
	for _, fd := range c.totals {
		unix.Close(fd)
	}
	c.fds -= len(c.totals)
	c.totals = nil
}

// hold gives the releaser its references to a new group's events.
func (c *Counter) hold(g *group) {
	if !c.rel.usable() {
		return
	}
	if first, err := c.rel.hold(g.fds, c.grouped); err == nil {
		g.held = first
	}
}

// holdTotal gives the releaser its reference to a total counter.
func (c *Counter) holdTotal(fd int) {
	if c.rel.usable() {
		c.rel.hold([]int{fd}, false)
	}
}

// Close releases every event, and returns once the kernel has released
// them (about 30 ms a tracepoint): the releaser closes its references
// first, so this process's are the last.
func (c *Counter) Close() error {
	c.rel.release()
	c.rel = nil
	c.closeAll()
	return nil
}

// Detach releases every event like Close, for a caller about to exit: the
// kernel's wait for the release of each tracepoint (about 30 ms apiece, 10 s
// for all syscalls) is left to the releaser, which holds the events until
// then, so Detach returns in milliseconds. Callers disable the counters
// first (Disable), so the target stops paying at once. When the releaser
// started at attach failed, Detach starts one and hands it every event;
// when that fails too, Detach is Close.
func (c *Counter) Detach() {
	if len(c.groups) == 0 && len(c.totals) == 0 {
		c.rel.close()
		return
	}
	if !c.rel.usable() {
		c.rel.close()
		c.rel, c.relErr = startReleaser()
		for _, g := range c.groups {
			if !g.final {
				c.hold(g)
			}
		}
		for _, fd := range c.totals {
			c.holdTotal(fd)
		}
	}
	if !c.rel.usable() || c.rel.detach() != nil {
		c.Close()
		return
	}
	c.closeAll()
	c.rel.close()
	c.rel = nil
}

func closeParallel(fds []int) {
	const workers = 64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(fds); i += workers {
				unix.Close(fds[i])
			}
		}()
	}
	wg.Wait()
}
