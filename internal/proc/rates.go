package proc

import "time"

// ProcRate is one process's activity between two snapshots.
type ProcRate struct {
	// Proc points into the later snapshot.
	Proc *Proc
	// New is true when the process was not in the earlier snapshot (or its
	// PID was reused): its rates are zero.
	New bool
	// UserPct and SysPct are CPU use in percent of one CPU: the threads'
	// run time (RunNS) split by the clock ticks' ratio when RunKnown, else
	// the clock ticks (see SplitCPU).
	UserPct, SysPct float64
	// ChildUserPct and ChildSysPct are the CPU of children reaped during the
	// interval, in percent of one CPU.
	ChildUserPct, ChildSysPct float64
	// VolPerSec and InvolPerSec are context switches per second summed over
	// the threads, counting threads created during the interval in full and
	// threads that exited not at all. Voluntary switches are wake-ups.
	VolPerSec, InvolPerSec float64
	// Vol, Invol and WaitNS are the same switch counts and run-queue
	// nanoseconds as whole numbers over the interval, for summing over
	// many intervals (internal/window) without rounding.
	Vol, Invol, WaitNS uint64
	// RunNS is the threads' time on CPU over the interval from schedstat,
	// merged by thread like the switches (Proc.RunMerged: a thread created
	// in the interval counts in full, one that exited loses its last
	// part-interval); exact to the nanosecond where the clock ticks move by
	// 10 ms. RunKnown says both readings had the threads (KnownCtxsw).
	RunNS    uint64
	RunKnown bool
	// SyscallsPerSec is syscr+syscw per second, -1 when io is unreadable.
	SyscallsPerSec float64
	// RunQueuePct is time spent runnable but waiting for a CPU, in percent
	// of one CPU (summed over threads).
	RunQueuePct float64
	// MinFltPerSec and MajFltPerSec are page faults per second.
	MinFltPerSec, MajFltPerSec float64
}

// TaskRate is one thread's activity between two snapshots.
type TaskRate struct {
	Task *Task
	New  bool
	// UserPct and SysPct are the thread's CPU in percent of one CPU: its
	// schedstat run time split by its clock ticks where its process's
	// threads were read at both ends, else its clock ticks.
	UserPct, SysPct        float64
	VolPerSec, InvolPerSec float64
	RunQueuePct            float64
	// SysTicks is the thread's kernel time over the interval in clock
	// ticks, all of it for a thread born in the interval. Unlike SysPct it
	// is counted across a change of the times' source (the one thread of a
	// process is read from its process's figures, which a Go program's
	// start, one thread then several, always changes), for attributing the
	// kernel time of a run between two readings (stacks' user-only leaf).
	SysTicks uint64
}

// Rates turns two snapshots into rates. It is reused across refreshes.
type Rates struct {
	// Interval is the time between the two snapshots.
	Interval time.Duration
	// Procs is parallel to the later snapshot's Procs.
	Procs []ProcRate
	// Tasks is parallel to the later snapshot's Tasks.
	Tasks []TaskRate
}

// Compute fills r with the rates from prev to cur. Processes and threads are
// matched by ID and, for processes, start time, so a reused PID is new.
// It does not allocate once r's slices have grown to size.
func (r *Rates) Compute(prev, cur *Snapshot) {
	dt := cur.Time.Sub(prev.Time)
	r.Interval = dt
	sec := dt.Seconds()
	if sec <= 0 {
		sec = 1e-9
	}
	tickPct := 100 / (sec * ClockTicks)
	nsPct := 100 / (sec * 1e9)
	r.Procs = grow(r.Procs, len(cur.Procs))
	r.Tasks = grow(r.Tasks, len(cur.Tasks))
	j := 0
	for i := range cur.Procs {
		c := &cur.Procs[i]
		for j < len(prev.Procs) && prev.Procs[j].PID < c.PID {
			j++
		}
		pr := &r.Procs[i]
		*pr = ProcRate{Proc: c, New: true, SyscallsPerSec: -1}
		var p *Proc
		if j < len(prev.Procs) && prev.Procs[j].PID == c.PID && prev.Procs[j].StartTime == c.StartTime {
			p = &prev.Procs[j]
			pr.New = false
			pr.UserPct = float64(Delta(p.UTime, c.UTime)) * tickPct
			pr.SysPct = float64(Delta(p.STime, c.STime)) * tickPct
			if p.Known&c.Known&KnownCtxsw != 0 {
				pr.RunNS, pr.RunKnown = Delta(p.RunMerged, c.RunMerged), true
				pr.UserPct, pr.SysPct = SplitCPU(float64(pr.RunNS)*nsPct, pr.UserPct, pr.SysPct, float64(c.UTime), float64(c.STime))
			}
			pr.ChildUserPct = float64(Delta(p.CUTime, c.CUTime)) * tickPct
			pr.ChildSysPct = float64(Delta(p.CSTime, c.CSTime)) * tickPct
			pr.MinFltPerSec = float64(Delta(p.MinFlt, c.MinFlt)) / sec
			pr.MajFltPerSec = float64(Delta(p.MajFlt, c.MajFlt)) / sec
			if r, w, ok := IOCalls(p, c); ok {
				pr.SyscallsPerSec = float64(r+w) / sec
			}
		}
		// Threads: merge-join by TID, summing switches over threads alive at
		// both ends (a thread that exited takes its counts with it).
		ct := cur.Tasks[c.taskLo:c.taskHi]
		var pt []Task
		if p != nil {
			pt = prev.Tasks[p.taskLo:p.taskHi]
		}
		k := 0
		var vol, invol, wait uint64
		for ti := range ct {
			t := &ct[ti]
			tr := &r.Tasks[int(c.taskLo)+ti]
			*tr = TaskRate{Task: t, New: true, SysTicks: t.STime}
			for k < len(pt) && pt[k].TID < t.TID {
				k++
			}
			if k >= len(pt) || pt[k].TID != t.TID {
				// A thread that appeared in a process seen before was created
				// during the interval (creating it made the process run, so
				// the reader lists it at once): all its switches are new.
				// Not so when the earlier reading had no threads at all (a
				// process first seen by its stat alone, Options.DeferNew):
				// then this reading is the threads' baseline.
				if p != nil && p.Known&KnownCtxsw != 0 {
					vol += t.VolCtxsw
					invol += t.InvolCtxsw
					wait += t.WaitNS
				}
				continue
			}
			o := &pt[k]
			tr.New, tr.SysTicks = false, Delta(o.STime, t.STime)
			if o.procTimes == t.procTimes {
				// Otherwise the thread gained or lost siblings and its
				// times changed source (Task.UTime): no baseline.
				tr.UserPct = float64(Delta(o.UTime, t.UTime)) * tickPct
				tr.SysPct = float64(Delta(o.STime, t.STime)) * tickPct
				if pr.RunKnown {
					tr.UserPct, tr.SysPct = SplitCPU(float64(Delta(o.RunNS, t.RunNS))*nsPct, tr.UserPct, tr.SysPct, float64(t.UTime), float64(t.STime))
				}
			}
			dv, di, dw := Delta(o.VolCtxsw, t.VolCtxsw), Delta(o.InvolCtxsw, t.InvolCtxsw), Delta(o.WaitNS, t.WaitNS)
			tr.VolPerSec = float64(dv) / sec
			tr.InvolPerSec = float64(di) / sec
			tr.RunQueuePct = float64(dw) * nsPct
			vol += dv
			invol += di
			wait += dw
		}
		if p != nil {
			pr.Vol, pr.Invol, pr.WaitNS = vol, invol, wait
			pr.VolPerSec = float64(vol) / sec
			pr.InvolPerSec = float64(invol) / sec
			pr.RunQueuePct = float64(wait) * nsPct
		}
	}
}

// SplitCPU shares cpu between user and kernel time by the interval's clock
// ticks (du, ds), or by the lifetime's (lu, ls) when no tick landed in the
// interval; all user when there were none. gosleuth's CPU is the threads'
// schedstat run time where it is known, exact to the nanosecond; the ticks,
// whole 10 ms grains charged to user or kernel by where they land, only
// tell the split (the window layer's CPUSec is the one definition).
func SplitCPU(cpu, du, ds, lu, ls float64) (user, sys float64) {
	switch {
	case du+ds > 0:
		return cpu * du / (du + ds), cpu * ds / (du + ds)
	case lu+ls > 0:
		return cpu * lu / (lu + ls), cpu * ls / (lu + ls)
	}
	return cpu, 0
}

// Delta is b-a for a counter read first as a, then as b; a counter that
// went backwards (a reset, a reused PID) counts as no change rather than a
// huge one. It is gosleuth's one saturating subtraction of counters: the
// argument order is always (earlier, later).
func Delta(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

// IOCalls is what a process's read- and write-class syscall counters
// (/proc/PID/io syscr and syscw) counted from its reading earlier to its
// reading later (the same process), and false when either reading lacks
// them (io unreadable).
func IOCalls(earlier, later *Proc) (reads, writes uint64, ok bool) {
	if earlier.Known&later.Known&KnownIO == 0 {
		return 0, 0, false
	}
	return Delta(earlier.SyscR, later.SyscR), Delta(earlier.SyscW, later.SyscW), true
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}
