//go:build linux

package proc

import (
	"debug/buildinfo"
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// addSlot starts watching pid. It reports false when the process is gone.
func (r *Reader) addSlot(pid int32) bool {
	s := &procSlot{statfd: -1, taskfd: -1, fdfd: -1, iofd: -1, limfd: -1, fresh: true, seen: r.gen}
	s.p.PID = pid
	s.p.FDs = -1
	s.p.FDLimit = -1
	b, err := r.read(&s.statfd, r.procHot, pid, 0, "stat")
	if err != nil {
		return false
	}
	var sf statFields
	if parseStat(b, &sf) != nil {
		r.closeFD(&s.statfd, r.procHot)
		return false
	}
	s.p.Kernel = sf.Flags&pfKthread != 0
	r.applyStat(s, &sf)
	r.slots[pid] = s
	r.order = append(r.order, s)
	if s.p.Kernel && r.opts.SkipKernelThreads {
		s.skip = true
		r.closeFD(&s.statfd, r.procHot)
		return true
	}
	var st unix.Statx_t
	if s.statfd >= 0 && rawFstatx(s.statfd, unix.STATX_UID, &st) == nil {
		s.p.UID = st.Uid
	}
	if r.opts.DeferNew && r.procfd >= 0 && r.refresh > 1 {
		// Most processes a busy host starts are gone by the next scan:
		// reading their threads, descriptors, limits and identity cost
		// about 30 syscalls each for nothing.
		s.deferred, s.bornGen = true, r.gen
		return true
	}
	if r.lateIdentity() {
		s.lateID, s.bornGen = true, r.gen
		return true // refreshProc lists and reads its threads
	}
	r.readIdentity(s)
	return true // refreshProc lists and reads its threads
}

// lateIdentity reports whether a process that appears now has its
// identity read only when seen again (Options.LateIdentity).
func (r *Reader) lateIdentity() bool {
	return r.opts.LateIdentity && r.procfd >= 0 && r.refresh > 1
}

// readIdentity reads what changes only at exec: the command line and
// whether the executable is a Go binary.
func (r *Reader) readIdentity(s *procSlot) {
	s.p.Cmdline = ""
	if !r.opts.SkipCmdline {
		if b, err := r.readCmdline(s.p.PID); err == nil {
			s.p.Cmdline = cmdlineString(b)
		}
	}
	s.p.Cgroup = ""
	if b, err := r.read(nil, false, s.p.PID, 0, "cgroup"); err == nil {
		s.p.Cgroup = cgroupPath(b)
	}
	s.p.GoVersion = ""
	s.p.Known &^= KnownExe
	if s.p.Kernel {
		s.p.Known |= KnownExe
		return
	}
	r.setPath(s.p.PID, 0, "exe")
	var st unix.Statx_t
	if err := rawStatx(r.path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			s.p.Known |= KnownExe // zombie or kernel: no executable
		}
		return
	}
	key := [2]uint64{uint64(st.Dev_major)<<32 | uint64(st.Dev_minor), st.Ino}
	if v, ok := r.exe[key]; ok {
		s.p.GoVersion = v
		s.p.Known |= KnownExe
		return
	}
	// Read through raw calls (sys_linux.go): a host that builds and runs
	// Go binaries shows a new executable every few seconds, and each read
	// through os woke the runtime's sysmon for a millisecond of polling.
	fd, err := openBytes(r.path, unix.O_RDONLY)
	if err == nil {
		var bi *buildinfo.BuildInfo
		if bi, err = buildinfo.Read(rawReaderAt(fd)); err == nil {
			s.p.GoVersion = bi.GoVersion
		}
		rawClose(fd)
	} else if errors.Is(err, os.ErrPermission) {
		return
	}
	// Not a Go binary (or unreadable as one): remember that too.
	r.exe[key] = s.p.GoVersion
	s.p.Known |= KnownExe
}

func (r *Reader) applyStat(s *procSlot, sf *statFields) {
	p := &s.p
	if string(sf.Comm) != p.Comm {
		p.Comm = string(sf.Comm)
	}
	p.PPID = int32(sf.PPID)
	p.State = sf.State
	p.UTime, p.STime, p.CUTime, p.CSTime = sf.UTime, sf.STime, sf.CUTime, sf.CSTime
	p.MinFlt, p.MajFlt = sf.MinFlt, sf.MajFlt
	p.StartTime = sf.StartTime
	p.RSSBytes = sf.RSSPages * r.pageSize
	p.Threads = int32(sf.Threads)
	s.cpu = int32(sf.Processor)
}

// checkThreads reads s's threads' schedstat and marks those that moved. It
// reports false when there is nothing more to read of s in this refresh
// (a process at first sight with Options.DeferNew, or one gone).
func (r *Reader) checkThreads(s *procSlot) bool {
	pid := s.p.PID
	if !r.undefer(s) {
		return false
	}
	s.ran, s.anyGone = s.fresh, false
	back := r.opts.IdleBackoff
	tasks := s.tasks
	ask := r.switchesFromTaskstats()
	if s.tsSkip {
		// Taskstats says no thread ran (Options.RanFromTaskstats).
		r.stats.Idle += len(tasks)
		tasks = nil
	} else if s.tsMoved > 0 {
		s.tsMoved--
	}
	for _, ts := range tasks {
		if back > 1 && !s.tsAll && ts.still >= back && (r.refresh+int(ts.t.TID))%back != 0 {
			r.stats.Idle++
			continue
		}
		b, err := r.read(&ts.schedfd, true, pid, ts.t.TID, "schedstat")
		if err != nil {
			if errors.Is(err, errGone) {
				ts.gone = true
				s.anyGone = true
			}
			continue
		}
		run, wait, slices, err := parseSchedstat(b)
		if err != nil {
			continue
		}
		moved := ts.fresh || run != ts.t.RunNS || slices != ts.t.Slices
		ts.t.RunNS, ts.t.WaitNS, ts.t.Slices = run, wait, slices
		ts.still++
		if moved {
			ts.still = 0
			r.stats.Changed++
			ts.moved = true
			if ask {
				ts.ans = int32(len(r.swTIDs))
				r.swTIDs = append(r.swTIDs, ts.t.TID)
			}
		}
	}
	return true
}

// undefer reads in full a process first seen with Options.DeferNew when it
// is seen again. It reports false when there is nothing more to read of s
// in this refresh (first sight, or gone).
func (r *Reader) undefer(s *procSlot) bool {
	if s.lateID && s.bornGen != r.gen {
		// Seen again (Options.LateIdentity): what identifies it, and
		// its descriptors, are read now.
		s.lateID = false
		r.readIdentity(s)
		r.readFDs(s)
	}
	if !s.deferred {
		return true
	}
	if s.bornGen == r.gen {
		return false // first sight: its stat is all there is
	}
	// Seen again: read it in full now, stat first (unless its leader's
	// task iterator record gave it).
	s.deferred = false
	s.fresh = false
	if !r.fromRec(s) && !r.rereadStat(s) {
		return false
	}
	s.fresh = true
	r.readIdentity(s)
	return true
}

// finishProc reads the threads of s that moved, then what else is due.
func (r *Reader) finishProc(s *procSlot, full bool) {
	pid := s.p.PID
	// The one thread of a single-threaded process is read by its switch
	// counts alone: the process's stat, read anyway when it ran, gives its
	// stat's figures (see Task.UTime).
	single := r.singleThreaded(s)
	for _, ts := range s.tasks {
		if !ts.moved {
			continue
		}
		ts.moved = false
		if r.readTask(pid, ts, !r.opts.SwitchesOnly && !single) {
			s.ran = true
		} else {
			s.anyGone = true
		}
	}
	ran, anyGone := s.ran, s.anyGone
	back := r.opts.IdleBackoff
	// Stat (for RSS) and limits are due although no thread ran at full
	// passes, or with IdleStatEvery once in that many, spread over every
	// refresh at a phase set by the PID.
	statDue := full
	limDue := full && (back <= 1 || (r.refresh/r.opts.FullEvery+int(pid))%back == 0)
	if n := r.opts.IdleStatEvery; n > 1 {
		period := r.opts.FullEvery * n
		statDue = (r.refresh+int(pid))%period == 0
		limDue = statDue && (back <= 1 || (r.refresh/period+int(pid))%back == 0)
	}
	if !ran && !anyGone && !statDue {
		return
	}
	// A new process's stat was just read by addSlot, and a process in
	// the task iterator's records has its stat's figures from them.
	fromRec := r.fromRec(s)
	if !s.fresh && !fromRec && !r.rereadStat(s) {
		return
	}
	if s.fresh || anyGone || s.newThreads || int(s.p.Threads) != r.liveTasks(s) {
		r.rescanTasks(s)
	}
	if !r.opts.SwitchesOnly && r.singleThreaded(s) && s.tasks[0].iterGen != r.gen {
		t := &s.tasks[0].t
		if t.Comm != s.p.Comm {
			t.Comm = s.p.Comm
		}
		t.State, t.Processor = s.p.State, s.cpu
		t.UTime, t.STime, t.procTimes = s.p.UTime, s.p.STime, true
	}
	if ran || (statDue && (s.fdDenied || s.ioDenied)) {
		if !s.lateID {
			r.readFDs(s)
		}
		if !fromRec || !r.it.io {
			r.readIO(s)
		}
	}
	if (s.fresh || limDue) && !fromRec {
		if b, err := r.read(&s.limfd, false, pid, 0, "limits"); err == nil {
			if v, err := parseLimitsNoFile(b); err == nil {
				s.p.FDLimit = v
				s.p.Known |= KnownFDLimit
			}
		}
	}
	var vol, invol, run, wait uint64
	for _, ts := range s.tasks {
		if ts.gone {
			continue
		}
		vol += ts.t.VolCtxsw
		invol += ts.t.InvolCtxsw
		run += ts.t.RunNS
		wait += ts.t.WaitNS
		// A thread first summed in a process known before was created
		// since: all its switches are new (its vol starts at 0).
		s.p.VolMerged += Delta(ts.vol, ts.t.VolCtxsw)
		s.p.InvolMerged += Delta(ts.invol, ts.t.InvolCtxsw)
		s.p.RunMerged += Delta(ts.run, ts.t.RunNS)
		ts.vol, ts.invol, ts.run = ts.t.VolCtxsw, ts.t.InvolCtxsw, ts.t.RunNS
	}
	if s.fresh {
		s.p.VolMerged, s.p.InvolMerged, s.p.RunMerged = vol, invol, run // the baseline
	}
	s.p.VolCtxsw, s.p.InvolCtxsw, s.p.RunNS, s.p.WaitNS = vol, invol, run, wait
	s.p.Known |= KnownCtxsw
	s.fresh = false
}

// rereadStat reads a known process's stat again. It reports false when the
// process is gone (or its PID was reused) or the file could not be read.
func (r *Reader) rereadStat(s *procSlot) bool {
	b, err := r.read(&s.statfd, r.procHot, s.p.PID, 0, "stat")
	if err != nil {
		if errors.Is(err, errGone) {
			s.gone = true
		}
		return false
	}
	var sf statFields
	if parseStat(b, &sf) != nil {
		return false
	}
	if sf.StartTime != s.p.StartTime {
		// The PID was reused between two reads of a descriptor-less slot.
		s.gone = true
		return false
	}
	// A new command name on a user process means exec (or a rename through
	// prctl): read what exec changes again. Kernel workers rename all the time.
	execd := !s.p.Kernel && string(sf.Comm) != s.p.Comm
	r.applyStat(s, &sf)
	if execd {
		r.readIdentity(s)
	}
	return true
}

func (r *Reader) liveTasks(s *procSlot) int {
	n := 0
	for _, ts := range s.tasks {
		if !ts.gone {
			n++
		}
	}
	return n
}

// singleThreaded reports whether s is a process of one thread, its leader,
// as its last stat and task listing say.
func (r *Reader) singleThreaded(s *procSlot) bool {
	return s.p.Threads == 1 && len(s.tasks) == 1 && s.tasks[0].t.TID == s.p.PID && !s.tasks[0].gone
}

// readTask reads a thread's stat (when stat is true) and status. It
// reports false when the thread exited.
func (r *Reader) readTask(pid int32, ts *taskSlot, stat bool) bool {
	ans := ts.ans // an answer is for this refresh only
	ts.ans = -1
	if stat && ts.iterGen != r.gen { // a record gives what stat does
		b, err := r.read(&ts.statfd, false, pid, ts.t.TID, "stat")
		if err != nil {
			if errors.Is(err, errGone) {
				ts.gone = true
				return false
			}
			return true
		}
		var sf statFields
		if parseStat(b, &sf) == nil {
			t := &ts.t
			if string(sf.Comm) != t.Comm {
				t.Comm = string(sf.Comm)
			}
			t.State = sf.State
			t.UTime, t.STime, t.procTimes = sf.UTime, sf.STime, false
			t.Processor = int32(sf.Processor)
		}
	}
	if ts.iterGen == r.gen {
		// The task iterator gave its switch counts.
		ts.fresh = false
		return true
	}
	if ans >= 0 {
		// The switch counts alone: taskstats gave them for less than
		// procfs renders the whole status.
		a := r.swOut[ans]
		if a.errno == unix.ESRCH {
			ts.gone = true
			return false
		}
		if a.ok {
			ts.t.VolCtxsw, ts.t.InvolCtxsw = a.sig.nvcsw, a.sig.nivcsw
			ts.fresh = false
			return true
		}
		// No answer: read the status as without taskstats.
	}
	b, err := r.read(&ts.statusfd, false, pid, ts.t.TID, "status")
	if err != nil {
		if errors.Is(err, errGone) {
			ts.gone = true
			return false
		}
		return true
	}
	if vol, invol, err := parseStatusCtxsw(b); err == nil {
		ts.t.VolCtxsw, ts.t.InvolCtxsw = vol, invol
	}
	ts.fresh = false
	return true
}

// rescanTasks lists /proc/PID/task, adds new threads (read in full) and drops
// the ones that exited.
func (r *Reader) rescanTasks(s *procSlot) {
	r.stats.Rescans++
	s.newThreads = false
	pid := s.p.PID
	fd, transient, err := r.ensure(&s.taskfd, r.procHot, pid, 0, "task", unix.O_DIRECTORY)
	if err != nil {
		if errors.Is(err, errGone) {
			s.gone = true
		}
		return
	}
	r.tids = r.tids[:0]
	if _, err := rawSeek(fd, 0, 0); err == nil {
		for {
			r.stats.Reads++
			n, err := rawGetdents(fd, r.dbuf)
			if err != nil || n <= 0 {
				break
			}
			forEachNumericDirent(r.dbuf[:n], func(id uint64) { r.tids = append(r.tids, int32(id)) })
		}
	}
	if transient {
		rawClose(fd)
	}
	r.tgen++
	mark := r.tgen
	added := false
	for _, tid := range r.tids {
		i, ok := slices.BinarySearchFunc(s.tasks, tid, func(t *taskSlot, tid int32) int { return int(t.t.TID - tid) })
		if ok {
			s.tasks[i].seen = mark
			continue
		}
		ts := &taskSlot{schedfd: -1, statfd: -1, statusfd: -1, fresh: true, seen: mark, ans: -1}
		ts.t.TID = tid
		s.tasks = append(s.tasks, ts)
		r.nTasks++
		added = true
	}
	if added {
		slices.SortFunc(s.tasks, func(a, b *taskSlot) int { return int(a.t.TID - b.t.TID) })
	}
	// Drop threads that exited; read new ones in full, but for the stat of
	// a single-threaded process's thread (finishProc gives it the
	// process's).
	single := r.singleThreaded(s)
	out := s.tasks[:0]
	for _, ts := range s.tasks {
		if ts.seen != mark || ts.gone {
			r.closeTask(ts)
			continue
		}
		if ts.fresh {
			if rec := r.iterRec(pid, ts.t.TID); rec != nil {
				ts.take(rec, r.gen)
			} else if b, err := r.read(&ts.schedfd, true, pid, ts.t.TID, "schedstat"); err == nil {
				ts.t.RunNS, ts.t.WaitNS, ts.t.Slices, _ = parseSchedstat(b)
			}
			if !r.readTask(pid, ts, !r.opts.SwitchesOnly && !single) {
				r.closeTask(ts)
				continue
			}
		}
		out = append(out, ts)
	}
	clear(s.tasks[len(out):])
	s.tasks = out
}

// readFDs counts the open descriptors of s, at most once a refresh.
func (r *Reader) readFDs(s *procSlot) {
	if s.fdGen == r.gen {
		return // read already in this refresh (a second sight, Options.LateIdentity)
	}
	s.fdGen = r.gen
	fd, transient, err := r.ensure(&s.fdfd, false, s.p.PID, 0, "fd", unix.O_DIRECTORY)
	if err != nil {
		s.fdDenied = errors.Is(err, errDenied)
		s.p.Known &^= KnownFDs
		return
	}
	s.fdDenied = false
	count := -1
	if r.fdSize {
		var st unix.Statx_t
		if rawFstatx(fd, unix.STATX_SIZE, &st) == nil {
			count = int(st.Size)
		}
	} else if _, err := rawSeek(fd, 0, 0); err == nil {
		count = 0
		for {
			r.stats.Reads++
			n, err := rawGetdents(fd, r.dbuf)
			if err != nil || n <= 0 {
				break
			}
			forEachNumericDirent(r.dbuf[:n], func(uint64) { count++ })
		}
	}
	if transient {
		rawClose(fd)
	}
	if count >= 0 {
		s.p.FDs = int32(count)
		s.p.Known |= KnownFDs
	}
}

func (r *Reader) readIO(s *procSlot) {
	if r.opts.SkipIO {
		return
	}
	b, err := r.read(&s.iofd, false, s.p.PID, 0, "io")
	if err != nil {
		s.ioDenied = errors.Is(err, errDenied)
		s.p.Known &^= KnownIO
		return
	}
	s.ioDenied = false
	if cr, cw, err := parseIO(b); err == nil {
		s.p.SyscR, s.p.SyscW = cr, cw
		s.p.Known |= KnownIO
	}
}

// dropGone forgets processes that exited and closes their descriptors.
func (r *Reader) dropGone() {
	out := r.order[:0]
	for _, s := range r.order {
		if s.gone {
			r.closeSlot(s)
			delete(r.slots, s.p.PID)
			if r.procfd >= 0 && !r.seekScan && r.it == nil {
				// A PID may have been reused: look again next time. (With
				// seekScan, a reused PID comes from the counter, which
				// /proc/loadavg shows moving; with the task iterator, the
				// new process is in its next records.)
				r.rescan = true
			}
			continue
		}
		out = append(out, s)
	}
	clear(r.order[len(out):])
	r.order = out
}
