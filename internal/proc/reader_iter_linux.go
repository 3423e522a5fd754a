//go:build linux

package proc

import (
	"bytes"
	"os"
	"slices"
)

// openTaskIter sets up Options.TasksFromBPF, or says in r.itOff why it
// cannot be used.
func (r *Reader) openTaskIter() {
	if r.procfd < 0 {
		r.itOff = "task iterator: only for a whole-host reader"
		return
	}
	// The iterator names tasks by their PIDs in the initial namespace:
	// the /proc root must be this process's, and this process in it.
	if !r.ownPIDNamespace() {
		r.itOff = "task iterator: " + r.root + " is not a procfs of this process's PID namespace"
		return
	}
	if b, err := os.ReadFile(r.root + "/self/status"); err == nil {
		if i := bytes.Index(b, []byte("\nNSpid:")); i >= 0 {
			line := b[i+8:]
			if j := bytes.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			if len(bytes.Fields(line)) > 1 {
				r.itOff = "task iterator: gosleuth runs in a PID namespace of its own"
				return
			}
		}
	}
	it, err := newTaskIter(r.opts.SkipKernelThreads)
	if err != nil {
		r.itOff = err.Error()
		return
	}
	r.it = it
}

// iterate reads every thread through the task iterator and matches the
// records to the slots: a thread with a slot gets its record's index, a
// process without one is listed in r.newPID, and a process with a thread
// the slots lack is marked for a task listing. It reports false when the
// iterator failed (it is then off for good, and the refresh reads /proc
// as without it).
func (r *Reader) iterate() bool {
	r.partial = r.partialIter()
	var err error
	if r.partial {
		err = r.it.readPartial(r.iterTIDs, r.iterPIDs, &r.stats.Reads)
		r.stats.IterPartial = true
	} else {
		err = r.it.read(&r.stats.Reads)
	}
	if err != nil {
		r.it.close()
		r.it = nil
		r.itOff = err.Error()
		r.rescan = true
		return false
	}
	r.stats.Iterated = len(r.it.recs)
	r.newPID = r.newPID[:0]
	var s *procSlot
	for i := range r.it.recs {
		rec := &r.it.recs[i]
		if s == nil || s.p.PID != rec.tgid {
			s = r.slots[rec.tgid]
		}
		if s == nil {
			if rec.tid == rec.tgid {
				r.newPID = append(r.newPID, int32(i))
			}
			continue
		}
		if s.skip || (r.partial && s.askGen != r.gen) {
			// (A record of a process not asked for: a TID asked for,
			// reused by one of its threads.)
			continue
		}
		s.iterGen = r.gen
		if rec.tid == rec.tgid {
			s.lgen, s.lrec = r.gen, int32(i)
		}
		j, ok := slices.BinarySearchFunc(s.tasks, rec.tid, func(t *taskSlot, tid int32) int { return int(t.t.TID - tid) })
		if !ok {
			s.newThreads = true
			continue
		}
		ts := s.tasks[j]
		ts.iterGen, ts.rec = r.gen, int32(i)
	}
	return true
}

// partialMax is the most processes a partial read asks for through the
// task iterator, and partialNew the most new ones: each costs a few
// system calls (an iterator created, read and closed, and a link at
// first), and one walk of every task costs about 0.9 ms at 650 tasks, as
// much as 40 or so. With the TID reader, the known processes' threads are
// read by TID instead, tidMax at most, in one call.
const (
	partialMax = 48
	partialNew = 16
)

// partialIter reports whether this refresh reads through the iterator the
// threads of some processes only (listed in r.iterPIDs), and not every
// task. With Options.IdleBackoff above 1, every task is read once in
// IdleBackoff refreshes; in between, only the processes one of whose
// threads ran in the last IdleBackoff reads, and the new ones, which
// /proc/loadavg's last PID tells appeared and a listing of /proc from
// there names. This is the files' idle back-off: a process that sleeps
// longer is seen running again up to IdleBackoff refreshes late, its
// counters exact; a thread created by such a process, and an exit, are
// seen as late. Where it cannot tell (no seekable procfs, a PID counter
// that wrapped, too many new or active processes) the refresh walks
// every task.
func (r *Reader) partialIter() bool {
	back := r.opts.IdleBackoff
	if back <= 1 || !r.seekScan {
		return false
	}
	// The last PID is read at every refresh, full walks too, so the next
	// partial read knows where the new PIDs start.
	prev := r.lastPID
	moved := r.lastPIDMoved()
	if r.rescan || r.refresh%back == 1 || r.refresh%iterScanEvery == 1 {
		return false
	}
	r.iterPIDs, r.iterTIDs = r.iterPIDs[:0], r.iterTIDs[:0]
	if moved {
		if prev == 0 || r.lastPID < prev {
			return false // wrapped: the new PIDs are not all above prev
		}
		if err := r.listPIDs(int32(prev)); err != nil {
			return false
		}
		for _, pid := range r.pids {
			if _, ok := r.slots[pid]; !ok {
				r.iterPIDs = append(r.iterPIDs, pid)
			}
		}
		if len(r.iterPIDs) > partialNew {
			return false
		}
	}
	byTID := r.it.tids != nil
	asked := len(r.iterPIDs)
	for _, s := range r.active {
		s.askGen = r.gen
		asked++
		if !byTID {
			if asked > partialMax {
				return false
			}
			r.iterPIDs = append(r.iterPIDs, s.p.PID)
			continue
		}
		// Its known threads, and its leader whatever they are: a thread
		// created since is seen in the leader's count, and its task
		// directory listed (finishProc).
		leader := false
		for _, ts := range s.tasks {
			if !ts.gone {
				leader = leader || ts.t.TID == s.p.PID
				r.iterTIDs = append(r.iterTIDs, ts.t.TID)
			}
		}
		if !leader {
			r.iterTIDs = append(r.iterTIDs, s.p.PID)
		}
		if len(r.iterTIDs) > tidMax {
			return false
		}
	}
	r.stats.IteratedProcs = asked
	return true
}

// iterScanEvery is how often, in refreshes, a reader with the task
// iterator lists /proc for processes the iterator does not show (ten
// minutes at one refresh a second). Under process churn a listing costs
// procfs a dentry and inode for every new process listed: at every full
// pass (one in ten refreshes) it was a quarter of a refresh's cost under
// 5,000 new processes a second, and still a quarter once in 60.
const iterScanEvery = 600

// addSlotFromRec starts watching a process found in the task iterator's
// records (recs[i] is its leader's), from the records alone: its stat's
// and io's figures, with no file read. With deferred (Options.DeferNew),
// it stops there until it is seen again (most processes a busy host starts
// exit before, and their first sight was the cost of a refresh under
// process churn); otherwise its identity is read now and its threads
// listed when it is finished.
func (r *Reader) addSlotFromRec(i int32, deferred bool) {
	rec := &r.it.recs[i]
	s := &procSlot{statfd: -1, taskfd: -1, fdfd: -1, iofd: -1, limfd: -1, fresh: true, seen: r.gen,
		deferred: deferred, bornGen: r.gen, iterGen: r.gen, lgen: r.gen, lrec: i}
	p := &s.p
	p.PID, p.UID = rec.tgid, rec.leader.euid
	p.StartTime = nsTicks(rec.start)
	p.FDs, p.FDLimit = -1, -1
	s.prev = rec.leader.prev
	r.applyRec(s)
	r.slots[p.PID] = s
	r.order = append(r.order, s)
	switch {
	case deferred:
	case r.lateIdentity():
		s.lateID = true
	default:
		r.readIdentity(s)
	}
}

// fromRec reports whether s's stat figures come from its leader's task
// iterator record in this refresh: it has one, and is not a kernel thread
// (whose name is its stat's).
func (r *Reader) fromRec(s *procSlot) bool {
	return s.lgen == r.gen && !s.p.Kernel
}

// applyRec gives s what its leader's record in this refresh holds: every
// figure of its stat (the CPU times split as stat splits them), its soft
// fd limit and, when the kernel keeps them, its io's syscall counts. It
// reports false when the record is of another process with the same PID
// (s is then gone).
func (r *Reader) applyRec(s *procSlot) bool {
	rec := &r.it.recs[s.lrec]
	l := rec.leader
	p := &s.p
	if nsTicks(rec.start) != p.StartTime {
		s.gone = true
		return false
	}
	// A new command name on a user process means exec (or a rename
	// through prctl): what exec changes is read again.
	execd := false
	if comm := rec.name(); string(comm) != p.Comm {
		execd = p.Comm != "" && !s.fresh
		p.Comm = string(comm)
	}
	p.PPID, p.State, p.Threads = l.ppid, rec.state, l.threads
	t := s.prev.adjust(l.run, l.utime, l.stime)
	p.UTime, p.STime = nsTicks(t.u), nsTicks(t.s)
	p.CUTime, p.CSTime = nsTicks(l.cutime), nsTicks(l.cstime)
	p.MinFlt, p.MajFlt = l.minFlt, l.majFlt
	p.RSSBytes = l.rssPages * r.pageSize
	s.cpu = rec.cpu
	p.FDLimit = l.fdLimit
	p.Known |= KnownFDLimit
	if r.it.io && !r.opts.SkipIO {
		p.SyscR, p.SyscW = l.syscr, l.syscw
		p.Known |= KnownIO
		s.ioDenied = false
	}
	if execd && !s.deferred && !s.lateID {
		r.readIdentity(s)
	}
	return true
}

// checkThreadsIter is checkThreads from the task iterator's records: the
// process gets its leader's (applyRec), a thread without one exited (or
// its TID was reused), and the others get what their schedstat, status
// and stat show from theirs, so no thread file is read, and no thread is
// backed off.
func (r *Reader) checkThreadsIter(s *procSlot) bool {
	if r.fromRec(s) && !r.applyRec(s) {
		return false
	}
	if !r.undefer(s) {
		return false
	}
	s.ran, s.anyGone = s.fresh, false
	s.still++
	for _, ts := range s.tasks {
		if ts.iterGen != r.gen {
			ts.gone, s.anyGone = true, true
			continue
		}
		rec := &r.it.recs[ts.rec]
		if ts.start != 0 && rec.start != ts.start {
			// The thread exited and its TID went to a new one.
			ts.gone, s.anyGone, s.newThreads = true, true, true
			ts.iterGen = 0
			continue
		}
		moved := ts.fresh || rec.run != ts.t.RunNS || rec.slices != ts.t.Slices
		ts.take(rec, r.gen)
		ts.still = 0
		if moved {
			r.stats.Changed++
			ts.moved = true
			s.still = 0
		}
	}
	return true
}

// take gives ts what its task iterator record in refresh gen holds: its
// schedstat's counters, switch counts, and its stat's state, CPU, name and
// CPU times (split as stat splits them).
func (ts *taskSlot) take(rec *iterRec, gen uint64) {
	if ts.start != rec.start {
		ts.prev = rec.prev // first sight: the kernel's last split
	}
	ts.iterGen, ts.start = gen, rec.start
	t := &ts.t
	t.State = rec.state
	if !ts.fresh && rec.run == t.RunNS && rec.slices == t.Slices {
		// It has not run: nothing else of it moved (but a rename from
		// outside, seen when it runs).
		t.WaitNS = rec.wait
		return
	}
	t.RunNS, t.WaitNS, t.Slices = rec.run, rec.wait, rec.slices
	t.VolCtxsw, t.InvolCtxsw = rec.nvcsw, rec.nivcsw
	if comm := rec.name(); string(comm) != t.Comm {
		t.Comm = string(comm)
	}
	t.Processor = rec.cpu
	c := ts.prev.adjust(rec.run, rec.utime, rec.stime)
	t.UTime, t.STime, t.procTimes = nsTicks(c.u), nsTicks(c.s), false
}

// iterRec returns the task iterator's record of thread tid of process pid
// in this refresh, or nil.
func (r *Reader) iterRec(pid, tid int32) *iterRec {
	if r.it == nil {
		return nil
	}
	rec := r.it.find(tid)
	if rec == nil || rec.tgid != pid {
		return nil
	}
	return rec
}
