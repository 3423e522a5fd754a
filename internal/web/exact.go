package web

import (
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/window"
)

// exactKinds group the syscalls counted by name (syscalls.CountedNames)
// for the chart; everything else counts as "other" (the exact total minus
// the kinds' calls).
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

// readExact starts, stops and reads exact syscall counting as viewers ask.
func (w *watch) readExact(sm *sampler, pt *point, now time.Time) {
	w.mu.Lock()
	want := w.exactWant
	w.mu.Unlock()
	if !want {
		if sm.exact != nil {
			e, released, prev := sm.exact, make(chan struct{}), sm.released
			go func() {
				defer close(released)
				e.Close()
				if prev != nil {
					<-prev // counters turned off before are released too
				}
			}()
			sm.released = released
			sm.exact, sm.exactBase, sm.exactLast = nil, nil, nil
			w.mu.Lock()
			w.exactOn = false
			w.mu.Unlock()
		}
		return
	}
	if sm.exact == nil {
		c, err := syscalls.CountExact(w.pid, syscalls.ExactOptions{FS: proc.NewFS(w.s.cfg.ProcRoot), Total: true})
		w.mu.Lock()
		if err != nil {
			w.exactWant, w.exactOn, w.exactWhy = false, false, err.Error()
		} else {
			w.exactOn, w.exactWhy, w.exactMech = true, "", c.Describe()
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
		sm.exact, sm.exactT0 = c, now
		if r, err := c.Read(); err == nil {
			sm.exactBase, sm.exactTot = r.ByName, r.Total
		}
		sm.exactLast, sm.exactLastT = sm.exactBase, now
		return
	}
	r, err := sm.exact.Read()
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
	d := window.SyscallsBetween(syscalls.Reading{ByName: sm.exactLast, Total: sm.exactTot}, r)
	var named uint64
	for _, k := range exactKinds {
		var n uint64
		for _, name := range k.names {
			n += d.ByName[name]
		}
		named += n
		pt[k.c] = float64(n) / dt
	}
	pt[colXOther] = float64(d.Total-min(named, d.Total)) / dt
	sm.exactLast, sm.exactTot, sm.exactLastT = r.ByName, r.Total, now
}
