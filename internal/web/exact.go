package web

import (
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// exactCounter counts a process's syscalls exactly while attached.
type exactCounter interface {
	// read returns the cumulative counts by syscall name (the names in
	// exactKinds and the doctor's) and the exact total of all syscalls.
	read() (map[string]uint64, uint64, error)
	close()
}

// exactKinds group syscalls for the chart; everything else counts as
// "other" (the exact total minus the named ones).
var exactKinds = []struct {
	c     col
	names []string
}{
	{colXFutex, []string{"futex"}},
	{colXPoll, []string{"epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_ctl", "poll", "ppoll", "pselect6"}},
	{colXSleep, []string{"nanosleep", "clock_nanosleep", "sched_yield"}},
	{colXRead, []string{"read", "pread64", "readv", "recvfrom", "recvmsg"}},
	{colXWrite, []string{"write", "pwrite64", "writev", "sendto", "sendmsg"}},
	{colXOpen, []string{"open", "openat", "openat2", "close", "fstat", "newfstatat", "statx", "fcntl"}},
	{colXMem, []string{"mmap", "munmap", "madvise"}},
}

// exactNames are the syscalls counted: the chart's kinds and the ones the
// doctor's rules read. A few dozen tracepoints rather than all ~360 keep
// attaching and releasing short.
var exactNames = func() []string {
	var out []string
	for _, k := range exactKinds {
		out = append(out, k.names...)
	}
	return append(out, "clone", "clone3", "execve", "wait4", "waitid", "rt_sigaction", "rt_sigprocmask", "getpid", "tgkill")
}()

// readExact starts, stops and reads exact syscall counting as viewers ask.
func (w *watch) readExact(sm *sampler, pt *point, now time.Time) {
	w.mu.Lock()
	want := w.exactWant
	w.mu.Unlock()
	if !want {
		if sm.exact != nil {
			go sm.exact.close()
			sm.exact, sm.exactBase, sm.exactLast = nil, nil, nil
			w.mu.Lock()
			w.exactOn = false
			w.mu.Unlock()
		}
		return
	}
	if sm.exact == nil {
		c, mech, err := newExactCounter(w.pid)
		w.mu.Lock()
		if err != nil {
			w.exactWant, w.exactOn, w.exactWhy = false, false, err.Error()
		} else {
			w.exactOn, w.exactWhy, w.exactMech = true, "", mech
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
		sm.exact, sm.exactT0 = c, now
		sm.exactBase, sm.exactTot, _ = c.read()
		sm.exactLast, sm.exactLastT = sm.exactBase, now
		return
	}
	counts, total, err := sm.exact.read()
	if err != nil {
		w.mu.Lock()
		w.exactWhy = err.Error()
		w.mu.Unlock()
		return
	}
	dt := now.Sub(sm.exactLastT).Seconds()
	if dt <= 0 {
		return
	}
	var named uint64
	for _, k := range exactKinds {
		var n uint64
		for _, name := range k.names {
			n += proc.Delta(sm.exactLast[name], counts[name])
		}
		named += n
		pt[k.c] = float64(n) / dt
	}
	if total >= sm.exactTot {
		pt[colXOther] = float64(total-sm.exactTot-min(named, total-sm.exactTot)) / dt
	}
	sm.exactLast, sm.exactTot, sm.exactLastT = counts, total, now
}
