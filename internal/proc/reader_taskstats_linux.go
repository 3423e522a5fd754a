//go:build linux

package proc

import (
	"golang.org/x/sys/unix"
)

// tsMinThreads is the fewest live threads a process must have to be asked
// about through taskstats: an answer costs the kernel about 1.8 us, a
// thread's schedstat pread about 0.7 us (both measured on Linux 6.18,
// BenchmarkTaskstatsAll and BenchmarkSchedstatAll), so for one or two
// threads the reads are cheaper.
const tsMinThreads = 3

// openTaskstats sets up Options.RanFromTaskstats, or says in r.tsOff why
// it cannot be used.
func (r *Reader) openTaskstats() {
	// Taskstats names processes in this process's PID namespace: the
	// /proc root must be one of it.
	if !r.ownPIDNamespace() {
		r.tsOff = "taskstats: " + r.root + " is not a procfs of this process's PID namespace"
		return
	}
	c, err := openTaskstats()
	if err != nil {
		r.tsOff = err.Error()
		return
	}
	r.ts = c
}

// askTaskstats asks which processes ran since their last answer and marks
// the others' threads to be left unread in this refresh.
func (r *Reader) askTaskstats() {
	back := max(r.opts.IdleBackoff, 1)
	r.tsPIDs, r.tsSlots = r.tsPIDs[:0], r.tsSlots[:0]
	for _, s := range r.order {
		s.tsSkip, s.tsAll = false, false
		if s.skip || s.deferred || s.fresh || len(s.tasks) < tsMinThreads {
			s.tsHave, s.tsMoved = false, 0
			continue
		}
		if s.tsHave && s.tsMoved == 0 && s.tsStill >= back && (r.refresh+int(s.p.PID))%back != 0 {
			// Still for a while and not due: as IdleBackoff does a thread.
			s.tsSkip = true
			r.stats.TaskstatsStill++
			continue
		}
		r.tsPIDs = append(r.tsPIDs, s.p.PID)
		r.tsSlots = append(r.tsSlots, s)
	}
	if len(r.tsPIDs) == 0 {
		return
	}
	r.tsOut = grow(r.tsOut, len(r.tsPIDs))
	r.ts.syscalls = 0
	err := r.ts.query(r.tsPIDs, r.tsOut, unix.TASKSTATS_CMD_ATTR_TGID)
	r.stats.Reads += r.ts.syscalls
	r.stats.TaskstatsAsked += len(r.tsPIDs)
	r.stats.TaskstatsLost = r.ts.lost
	if err != nil {
		// The socket failed as a whole: every process is read as without
		// taskstats from now on, and the stats say why.
		r.ts.close()
		r.ts = nil
		r.tsOff = err.Error()
		for _, s := range r.order {
			s.tsSkip, s.tsHave, s.tsMoved = false, false, 0
		}
		return
	}
	for i, s := range r.tsSlots {
		a := &r.tsOut[i]
		if !a.ok {
			// Gone (ESRCH: the reads find it so) or the reply was lost:
			// read as without taskstats, against the old answer next time.
			continue
		}
		if s.tsHave && a.sig == s.tsSig {
			s.tsStill++
			if s.tsMoved == 0 {
				s.tsSkip = true
				r.stats.TaskstatsStill++
			}
			continue
		}
		// The answer is taken before the threads are read, so anything
		// that runs after it moves the next one.
		s.tsAll = s.tsHave && back > 1 && s.tsStill >= back
		s.tsSig, s.tsHave, s.tsStill = a.sig, true, 0
		s.tsMoved = back
	}
}

// switchesFromTaskstats reports whether the switch counts of threads that
// ran are asked through taskstats in this refresh (Options.SwitchesFromTaskstats,
// or SwitchesOnly with RanFromTaskstats) rather than read from their status.
func (r *Reader) switchesFromTaskstats() bool {
	return r.ts != nil && (r.opts.SwitchesFromTaskstats || r.opts.SwitchesOnly)
}

// askSwitches asks, in one batch, the switch counts of the threads
// checkThreads found had run. A thread without an answer (a lost reply, or
// the socket failed) is read by its status.
func (r *Reader) askSwitches() {
	if len(r.swTIDs) == 0 {
		return
	}
	r.swOut = grow(r.swOut, len(r.swTIDs))
	clear(r.swOut)
	r.ts.syscalls = 0
	err := r.ts.query(r.swTIDs, r.swOut, unix.TASKSTATS_CMD_ATTR_PID)
	r.stats.Reads += r.ts.syscalls
	r.stats.TaskstatsThreads += len(r.swTIDs)
	r.stats.TaskstatsLost = r.stats.TaskstatsLost || r.ts.lost
	if err != nil {
		// Every process is read as without taskstats from now on.
		clear(r.swOut)
		r.ts.close()
		r.ts = nil
		r.tsOff = err.Error()
		r.stats.TaskstatsOff = r.tsOff
		for _, s := range r.order {
			s.tsSkip, s.tsHave, s.tsMoved = false, false, 0
		}
	}
}
