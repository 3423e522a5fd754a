package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// doctorSyscalls are the syscalls the rules read, plus the common I/O ones
// that tell work from churn. Counting a few dozen tracepoints instead of all
// ~360 keeps attach and, above all, release short: the kernel frees each
// tracepoint event after an RCU grace period, about 30 ms apiece here.
var doctorSyscalls = []string{
	"futex", "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_ctl", "nanosleep", "clock_nanosleep", "sched_yield",
	"open", "openat", "openat2", "close", "fstat", "newfstatat", "statx", "fcntl",
	"read", "write", "pread64", "pwrite64", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg",
	"clone", "clone3", "execve", "wait4", "waitid", "rt_sigaction", "rt_sigprocmask", "getpid", "tgkill", "mmap", "munmap", "madvise",
}

// attachMu makes counters attach one process at a time: attaches running
// side by side were seen to leave counters that never counted.
var attachMu sync.Mutex

// Look implements Look.
func (l SyscallsLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	events, err := syscalls.SyscallEventsNamed(syscalls.HostArch, doctorSyscalls)
	if err != nil {
		return fmt.Errorf("list syscall tracepoints: %w", err)
	}
	// Attaching can wait on the kernel's tracepoint mutex for as long as
	// another process takes to release its own events (minutes were seen
	// on a host shared with other tracers): the verdict does not wait for
	// it. A counter attached after the window is closed when it comes.
	type attached struct {
		c   *syscalls.Counter
		err error
	}
	done := make(chan attached, 1)
	go func() {
		attachMu.Lock()
		c, err := syscalls.NewCounter(pid, syscalls.CounterOptions{Events: events, ThreadsOnly: true, ProcRoot: l.ProcRoot})
		attachMu.Unlock()
		done <- attached{c, err}
	}()
	var c *syscalls.Counter
	select {
	case a := <-done:
		c, err = a.c, a.err
	case <-ctx.Done():
		go func() {
			if a := <-done; a.c != nil {
				a.c.Close()
			}
		}()
		return fmt.Errorf("count syscalls: attaching did not finish within the window (the kernel's tracepoint lock was held, by another tracer releasing its events)")
	}
	if errors.Is(err, syscalls.ErrTooManyFDs) {
		// Thousands of threads: one BPF program counts them all.
		return bpfLook(ctx, pid, d, w)
	}
	if err != nil {
		return fmt.Errorf("count syscalls: %w", err)
	}
	start := time.Now()
	sleepCtx(ctx, d)
	sum := make([]uint64, len(events))
	_, _, rerr := c.Read(sum, false)
	sec := time.Since(start).Seconds()
	// Release in the background: the verdict need not wait for the
	// kernel's grace periods, and the descriptors are close-on-exec and
	// freed with the process in any case.
	go c.Close()
	if rerr != nil {
		return fmt.Errorf("read syscall counters: %w", rerr)
	}
	// Attaching can wait on the kernel (releasing other tracepoint events
	// holds a mutex): a window too short to count in is no evidence.
	if sec < min(1, d.Seconds()/2) {
		return fmt.Errorf("count syscalls: attached for only %.2f s of %.1f s", sec, d.Seconds())
	}
	counts := map[string]uint64{}
	for i, e := range events {
		if sum[i] > 0 {
			counts[e.Name] += sum[i]
		}
	}
	w.Syscalls = &Syscalls{Seconds: sec, Counts: counts, Mechanism: "per-task tracepoint counters"}
	return nil
}

// bpfLook counts the syscalls of a process with too many threads for one
// perf counter per syscall and thread (2,000 threads need 76,000
// descriptors) with the BPF counter, keeping the names the rules read.
func bpfLook(ctx context.Context, pid int, d time.Duration, w *Window) error {
	c, err := syscalls.NewBPFCounter(pid)
	if err != nil {
		return fmt.Errorf("count syscalls (too many threads for per-task counters): %w", err)
	}
	defer c.Close()
	start := time.Now()
	sleepCtx(ctx, d)
	byNr, err := c.Read()
	sec := time.Since(start).Seconds()
	if err != nil {
		return err
	}
	counts := map[string]uint64{}
	for nr, n := range byNr {
		if name := syscalls.Name(syscalls.HostArch, nr); slices.Contains(doctorSyscalls, name) {
			counts[name] += n
		}
	}
	w.Syscalls = &Syscalls{Seconds: sec, Counts: counts, Mechanism: "one BPF program on raw_syscalls:sys_enter (too many threads for per-task counters)"}
	return nil
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
