//go:build linux

package proc

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reader reads processes and threads from /proc. It is not safe for
// concurrent use: one collector goroutine owns it.
type Reader struct {
	opts     Options
	root     string
	max      int
	procfd   int // kept handle on the /proc directory, -1 in PIDs mode
	loadfd   int // kept /proc/loadavg, -1 when absent
	lastPID  uint64
	slots    map[int32]*procSlot
	order    []*procSlot // live slots sorted by PID
	buf      []byte
	dbuf     []byte
	path     []byte
	pids     []int32 // scratch for scanProc
	tids     []int32 // scratch for rescanTasks
	kept     int
	warmKept int
	nTasks   int
	refresh  int
	gen      uint64 // marks processes seen in a /proc scan
	tgen     uint64 // marks threads seen in a task directory scan
	rescan   bool   // list every PID at the next refresh
	seekScan bool   // Options.NewPIDsOnly, checked to work on this procfs
	// procHot: a process's stat and task directory are read often enough
	// to keep their descriptors before any warm one (not so with
	// Options.IdleStatEvery, which reads a still process's stat rarely:
	// then only the threads' schedstat descriptors are hot).
	procHot  bool
	pageSize uint64
	fdSize   bool // fstat on /proc/PID/fd reports the count (Linux >= 6.2)
	exe      map[[2]uint64]string
	stats    ReadStats
	closed   bool
	// Options.RanFromTaskstats: the socket (nil when not in use, tsOff
	// then says why) and the scratch of one refresh's questions.
	ts      *taskstatsConn
	tsOff   string
	tsPIDs  []int32
	tsSlots []*procSlot
	tsOut   []tsAnswer
	// work: the processes whose threads were checked in this refresh, to
	// be finished once the switch counts of those that ran are asked in
	// one batch (swTIDs, answered in swOut; see switchesFromTaskstats).
	work   []*procSlot
	swTIDs []int32
	swOut  []tsAnswer
	// Options.TasksFromBPF: the iterator (nil when not in use, itOff then
	// says why) and its records of the leaders of processes that have no
	// slot.
	it     *taskIter
	itOff  string
	newPID []int32 // indexes into it.recs
	// partial: this refresh ran the iterator over the threads of the
	// processes in iterPIDs only, not every task (Options.IdleBackoff).
	partial  bool
	iterPIDs []int32
	iterTIDs []int32
	// active: the processes the iterator showed that ran in the last
	// IdleBackoff reads, as the last refresh left them (partialIter).
	active []*procSlot
	// procScans counts listings of /proc (scanProc), for tests.
	procScans int
}

type procSlot struct {
	p      Proc
	statfd int
	taskfd int
	fdfd   int
	iofd   int
	limfd  int
	tasks  []*taskSlot // sorted by TID
	seen   uint64
	skip   bool  // a kernel thread left out by SkipKernelThreads
	cpu    int32 // the CPU its stat says it last ran on
	fresh  bool  // not read in full yet
	// deferred marks a process first seen by a whole-host scan with
	// Options.DeferNew: only its stat was read, in generation bornGen.
	deferred bool
	bornGen  uint64
	// lateID: Options.LateIdentity left its identity and descriptors
	// unread at first sight, in generation bornGen.
	lateID bool
	// fdGen is the generation whose refresh last read its descriptors.
	fdGen uint64
	gone  bool
	// ran and anyGone: what checkThreads found (a thread ran, one exited).
	ran      bool
	anyGone  bool
	fdDenied bool
	ioDenied bool
	// Options.RanFromTaskstats: the last answer (tsHave: there is one),
	// the answers in a row that did not move, the refreshes left in which
	// its threads are read as without taskstats after a move (so that
	// every thread backed off by IdleBackoff is checked once after it),
	// and whether this refresh leaves its threads unread.
	tsSig   ranSig
	tsHave  bool
	tsStill int
	tsMoved int
	tsSkip  bool
	// tsAll: it ran after IdleBackoff still answers or more, so its
	// threads, all backed off by then, are all checked in this refresh.
	tsAll bool
	// newThreads: the task iterator found a thread of it that has no
	// slot, so its task directory is listed in this refresh.
	newThreads bool
	// iterGen is the last refresh whose task iterator records held it;
	// lgen the last whose records held its leader's, at index lrec.
	iterGen uint64
	lgen    uint64
	lrec    int32
	// askGen is the last refresh whose partial iterator read asked for
	// its threads; still counts the iterator reads in a row that found
	// none of them had run (Options.IdleBackoff).
	askGen uint64
	still  int
	// prev is the last split of its run time (see cputime.adjust).
	prev cputime
}

type taskSlot struct {
	t        Task
	schedfd  int
	statfd   int
	statusfd int
	seen     uint64
	fresh    bool
	gone     bool
	// moved: its schedstat moved in this refresh; ans indexes its switch
	// counts' answer in Reader.swOut (-1: none asked).
	moved bool
	ans   int32
	// still counts the checks in a row that found the thread had not run
	// (Options.IdleBackoff).
	still int
	// iterGen is the refresh whose task iterator records hold this
	// thread, at index rec; start is its start_boottime there, which
	// tells a reused TID.
	iterGen uint64
	rec     int32
	start   uint64
	prev    cputime
	// vol, invol and run are the switch counts and run time last added
	// to its process's Proc.VolMerged, InvolMerged and RunMerged.
	vol, invol, run uint64
}

// Errors a read can end in. errGone means the task exited (ENOENT, ESRCH);
// it is never shown to users: the task just drops out.
var (
	errGone   = errors.New("task exited")
	errDenied = errors.New("permission denied")
)

const (
	defaultMaxFDs    = 4096
	defaultFullEvery = 10
)

// NewReader opens the /proc root and prepares a Reader. Close releases every
// descriptor it keeps.
func NewReader(opts Options) (*Reader, error) {
	if opts.Root == "" {
		opts.Root = "/proc"
	}
	if opts.MaxFDs <= 0 {
		opts.MaxFDs = defaultMaxFDs
	}
	if opts.FullEvery <= 0 {
		opts.FullEvery = defaultFullEvery
	}
	r := &Reader{
		opts:     opts,
		root:     opts.Root,
		max:      opts.MaxFDs,
		procfd:   -1,
		loadfd:   -1,
		slots:    make(map[int32]*procSlot),
		buf:      make([]byte, 16<<10),
		dbuf:     make([]byte, 32<<10),
		path:     make([]byte, 0, 256),
		rescan:   true,
		pageSize: uint64(os.Getpagesize()),
		exe:      make(map[[2]uint64]string),
		procHot:  opts.IdleStatEvery <= 1,
	}
	// Leave room under the process's own descriptor limit for everything
	// else gosleuth opens.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(r.max)+128 {
		r.max = max(int(lim.Cur)-128, 16)
	}
	if len(opts.PIDs) == 0 {
		fd, err := unix.Open(r.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", r.root, err)
		}
		r.procfd = fd
		if fd, err := unix.Open(r.root+"/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			r.loadfd = fd
		}
		r.seekScan = opts.NewPIDsOnly && r.checkSeekScan()
	} else {
		for _, pid := range opts.PIDs {
			if pid <= 0 || pid > 1<<30 {
				return nil, fmt.Errorf("new reader: invalid pid %d", pid)
			}
		}
	}
	if opts.TasksFromBPF {
		r.openTaskIter()
	}
	if r.it == nil && (opts.RanFromTaskstats || opts.SwitchesFromTaskstats) {
		r.openTaskstats()
	}
	var st unix.Stat_t
	var sfs unix.Statfs_t
	if unix.Statfs(r.root, &sfs) == nil && sfs.Type == unix.PROC_SUPER_MAGIC &&
		unix.Stat(r.root+"/self/fd", &st) == nil && st.Size > 0 {
		r.fdSize = true
	}
	return r, nil
}

// Close releases every descriptor the reader keeps. It is safe to call twice.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	for _, s := range r.slots {
		r.closeSlot(s)
	}
	r.order, r.slots = nil, nil
	if r.procfd >= 0 {
		rawClose(r.procfd)
	}
	if r.loadfd >= 0 {
		rawClose(r.loadfd)
	}
	if r.ts != nil {
		r.ts.close()
	}
	if r.it != nil {
		r.it.close()
	}
	return nil
}

// ownPIDNamespace reports whether the /proc root is a procfs of this
// process's PID namespace (its "self" names this process).
func (r *Reader) ownPIDNamespace() bool { return NewFS(r.root).ownNamespace() }

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

// Snapshot reads every watched process and thread into dst, reusing dst's
// slices. Processes that exit during the read are left out silently.
func (r *Reader) Snapshot(dst *Snapshot) error {
	if r.closed {
		return errors.New("snapshot: reader closed")
	}
	start := time.Now()
	r.stats = ReadStats{MaxFDs: r.max}
	r.gen++
	full := r.refresh%r.opts.FullEvery == 0
	r.refresh++
	r.stats.Full = full
	r.stats.TasksFromBPFOff = r.itOff
	if r.it != nil && r.iterate() {
		// The iterator finds new processes, and /proc is listed only at
		// the first refresh and once in iterScanEvery: a kernel may keep
		// a process from BPF iterators (this project's CI kernel hides its
		// sandbox's PID 1), and such a process is read through /proc as
		// without the iterator.
		for _, i := range r.newPID {
			rec := &r.it.recs[i]
			if !rec.kernel {
				r.addSlotFromRec(i, r.opts.DeferNew && r.refresh > 1)
			} else if r.addSlot(rec.tgid) {
				// A kernel thread's name is its stat's (a
				// workqueue worker's shows its queue), read once.
				r.slots[rec.tgid].iterGen = r.gen
			}
		}
		if len(r.newPID) > 0 {
			r.sortOrder()
		}
		r.stats.Listed += len(r.newPID)
		if r.rescan || r.refresh%iterScanEvery == 1 {
			if err := r.scanProc(0); err != nil {
				return err
			}
		}
	} else if r.procfd >= 0 && r.seekScan {
		// The last PID is read at every refresh, full or not, so a counter
		// that wrapped is told from one that moved on by one interval's
		// forks, not by a full pass's.
		prev := r.lastPID
		moved := r.lastPIDMoved()
		from := int32(0)
		if !r.rescan && !full && prev != 0 && r.lastPID > prev {
			// Every PID created since the last refresh is above the last
			// one it saw, a reused one too: it comes from the counter.
			from = int32(prev)
		}
		if moved || r.rescan || full {
			if err := r.scanProc(from); err != nil {
				return err
			}
		}
	} else if r.procfd >= 0 {
		if r.rescan || full || r.lastPIDMoved() {
			if err := r.scanProc(0); err != nil {
				return err
			}
		}
	} else if r.refresh == 1 {
		for _, pid := range r.opts.PIDs {
			if _, ok := r.slots[int32(pid)]; !ok {
				r.addSlot(int32(pid))
			}
		}
		r.sortOrder()
	}
	r.rescan = false
	r.stats.TaskstatsOff = r.tsOff
	if r.ts != nil && r.opts.RanFromTaskstats {
		r.askTaskstats()
	}
	r.work, r.swTIDs = r.work[:0], r.swTIDs[:0]
	iter := r.it != nil
	for _, s := range r.order {
		if s.skip {
			continue
		}
		if iter && s.iterGen == r.gen {
			if r.checkThreadsIter(s) {
				r.work = append(r.work, s)
			}
		} else if iter && r.partial && s.askGen != r.gen && s.iterGen != 0 {
			// Not asked for in a partial read: as it was.
		} else if iter && s.iterGen != 0 {
			// The iterator showed it before and no longer does: it exited.
			// Under process churn most slots end so, and trying their
			// files (an open that fails) was a tenth of a refresh.
			s.gone = true
		} else if r.checkThreads(s) {
			r.work = append(r.work, s)
		}
	}
	r.askSwitches()
	for _, s := range r.work {
		r.finishProc(s, full)
	}
	r.dropGone()
	if full {
		r.rebalance()
	}
	if r.it != nil && len(r.it.pidLinks) > 0 {
		// A process left out of the next partial reads has its link
		// closed; one still active keeps it.
		r.it.dropLinks(func(pid int32) bool {
			s := r.slots[pid]
			return s != nil && s.still < r.opts.IdleBackoff && r.it.tids == nil
		})
	}
	dst.Procs = dst.Procs[:0]
	dst.Tasks = dst.Tasks[:0]
	clear(r.active)
	r.active = r.active[:0]
	for _, s := range r.order {
		if s.skip {
			continue
		}
		if r.it != nil && s.iterGen != 0 && s.still < r.opts.IdleBackoff {
			r.active = append(r.active, s)
		}
		p := s.p
		p.taskLo = int32(len(dst.Tasks))
		if !r.opts.NoTasks {
			for _, ts := range s.tasks {
				dst.Tasks = append(dst.Tasks, ts.t)
			}
		}
		p.taskHi = int32(len(dst.Tasks))
		dst.Procs = append(dst.Procs, p)
		if !s.deferred && (s.fdDenied || s.ioDenied || p.Known&KnownExe == 0) {
			r.stats.Denied = true
		}
	}
	r.stats.KeptFDs = r.kept
	dst.Time = time.Now()
	r.stats.Duration = dst.Time.Sub(start)
	dst.Stats = r.stats
	return nil
}

// lastPIDMoved reports whether a process was created since the last scan,
// from the last field of /proc/loadavg ("0.53 0.14 0.05 1/77 1884"). Exits
// are noticed through ESRCH on the exited tasks' kept descriptors.
func (r *Reader) lastPIDMoved() bool {
	if r.loadfd < 0 {
		return true
	}
	r.stats.Reads++
	n, err := rawPread(r.loadfd, r.buf, 0)
	if err != nil || n == 0 {
		return true
	}
	b := trimSpace(r.buf[:n])
	i := len(b)
	for i > 0 && b[i-1] != ' ' {
		i--
	}
	v, ok := atou(b[i:])
	if !ok {
		return true
	}
	moved := v != r.lastPID
	r.lastPID = v
	return moved
}

// iterScanEvery is how often, in refreshes, a reader with the task
// iterator lists /proc for processes the iterator does not show (ten
// minutes at one refresh a second). Under process churn a listing costs
// procfs a dentry and inode for every new process listed: at every full
// pass (one in ten refreshes) it was a quarter of a refresh's cost under
// 5,000 new processes a second, and still a quarter once in 60.
const iterScanEvery = 600

// tgidOffset is where procfs's root directory lists PID 0: PID n is at
// position tgidOffset+n (fs/proc/base.c, TGID_OFFSET since Linux 3.17).
const tgidOffset = 258

// scanProc lists /proc with getdents64 and adds new processes. With from
// above 0, it lists PIDs from there up to r.lastPID only
// (Options.NewPIDsOnly) and leaves the others as they are.
func (r *Reader) scanProc(from int32) error {
	r.stats.Rescans++
	r.procScans++
	// Collect the PIDs first: adding a process lists its task directory
	// through the same buffer.
	if err := r.listPIDs(from); err != nil {
		return err
	}
	added := false
	for _, pid := range r.pids {
		if s, ok := r.slots[pid]; ok {
			s.seen = r.gen
			continue
		}
		if r.addSlot(pid) {
			added = true
		}
	}
	if from == 0 {
		for _, s := range r.order {
			if s.seen != r.gen {
				s.gone = true
			}
		}
	}
	if added {
		r.sortOrder()
	}
	return nil
}

// listPIDs lists the PIDs of /proc into r.pids: all of them, or with from
// above 0 those from there up to r.lastPID (Options.NewPIDsOnly).
func (r *Reader) listPIDs(from int32) error {
	off := int64(0)
	buf := r.dbuf
	if from > 0 {
		off = tgidOffset + int64(from)
		// The kernel renders as many entries as fit, and older processes
		// sit above the new PIDs once the counter has wrapped: read in
		// small steps and stop past the last PID.
		buf = r.dbuf[:1024]
	}
	if _, err := rawSeek(r.procfd, off, 0); err != nil {
		return fmt.Errorf("rewind %s: %w", r.root, err)
	}
	r.pids = r.pids[:0]
	for {
		r.stats.Reads++
		n, err := rawGetdents(r.procfd, buf)
		if err != nil {
			return fmt.Errorf("list %s: %w", r.root, err)
		}
		if n <= 0 {
			break
		}
		forEachNumericDirent(buf[:n], func(id uint64) { r.pids = append(r.pids, int32(id)) })
		if from > 0 && len(r.pids) > 0 && uint64(r.pids[len(r.pids)-1]) > r.lastPID {
			break
		}
	}
	r.stats.Listed += len(r.pids)
	return nil
}

// checkSeekScan reports whether listing the procfs root from a PID's
// position starts at that PID, as Options.NewPIDsOnly needs: the root is a
// procfs of this process's PID namespace (so /proc/loadavg's last PID is
// in its numbering) and the kernel places PIDs at tgidOffset.
func (r *Reader) checkSeekScan() bool {
	var sfs unix.Statfs_t
	if unix.Fstatfs(r.procfd, &sfs) != nil || sfs.Type != unix.PROC_SUPER_MAGIC || r.loadfd < 0 {
		return false
	}
	self, err := os.Readlink(r.root + "/self")
	if err != nil || self != strconv.Itoa(os.Getpid()) {
		return false
	}
	if _, err := rawSeek(r.procfd, tgidOffset+int64(os.Getpid()), 0); err != nil {
		return false
	}
	n, err := rawGetdents(r.procfd, r.dbuf)
	if err != nil || n <= 0 {
		return false
	}
	first := int32(-1)
	forEachNumericDirent(r.dbuf[:n], func(id uint64) {
		if first < 0 {
			first = int32(id)
		}
	})
	return first == int32(os.Getpid())
}

func (r *Reader) sortOrder() {
	slices.SortFunc(r.order, func(a, b *procSlot) int { return int(a.p.PID - b.p.PID) })
}

// forEachNumericDirent calls fn for each entry of a getdents64 buffer whose
// name is a decimal number.
func forEachNumericDirent(b []byte, fn func(uint64)) {
	for len(b) >= 19 {
		reclen := int(b[16]) | int(b[17])<<8
		if reclen < 19 || reclen > len(b) {
			return
		}
		name := b[19:reclen]
		end := 0
		for end < len(name) && name[end] != 0 {
			end++
		}
		if v, ok := atou(name[:end]); ok {
			fn(v)
		}
		b = b[reclen:]
	}
}

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

// A refresh reads each process in two steps: checkThreads reads every
// thread's schedstat, then (once the switch counts of the threads that ran
// are asked in one batch, askSwitches) finishProc reads the stat and status
// of the threads that ran, then the process files if anything moved.
//
// A thread's CPU times, switch counts and state, and a process's descriptor
// count and io counters, change only when one of its threads runs, which
// moves schedstat. Only RSS (reclaim) and the limits (prlimit from outside)
// change behind a sleeping process's back: a full pass re-reads just those.

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

// rebalance closes descriptors of the warm class (read only when a task ran)
// beyond their share, so the hot ones (schedstat, read every refresh) keep
// room under the cap as the task count grows.
func (r *Reader) rebalance() {
	budget := r.warmBudget()
	for _, s := range r.order {
		if r.warmKept <= budget {
			return
		}
		for _, ts := range s.tasks {
			r.closeFD(&ts.statfd, false)
			r.closeFD(&ts.statusfd, false)
		}
		r.closeFD(&s.iofd, false)
		r.closeFD(&s.fdfd, false)
		r.closeFD(&s.limfd, false)
		if !r.procHot {
			r.closeFD(&s.statfd, false)
			r.closeFD(&s.taskfd, false)
		}
	}
}

// warmBudget is what the cap leaves for warm descriptors once every task's
// schedstat and every process's stat and task directory (the hot ones) fit;
// with IdleStatEvery, the schedstat ones alone.
func (r *Reader) warmBudget() int {
	if !r.procHot {
		return r.max - r.nTasks
	}
	return r.max - r.nTasks - 2*len(r.order)
}

func (r *Reader) closeSlot(s *procSlot) {
	for _, ts := range s.tasks {
		r.closeTask(ts)
	}
	s.tasks = nil
	r.closeFD(&s.statfd, r.procHot)
	r.closeFD(&s.taskfd, r.procHot)
	r.closeFD(&s.fdfd, false)
	r.closeFD(&s.iofd, false)
	r.closeFD(&s.limfd, false)
}

// closeTask releases a thread's descriptors and its place in the budget. It
// is called once per thread: the thread leaves its process's list with it.
func (r *Reader) closeTask(ts *taskSlot) {
	r.nTasks--
	r.closeFD(&ts.schedfd, true)
	r.closeFD(&ts.statfd, false)
	r.closeFD(&ts.statusfd, false)
	ts.fresh = false
	ts.gone = true
}

func (r *Reader) closeFD(fdp *int, hot bool) {
	if *fdp < 0 {
		return
	}
	rawClose(*fdp)
	*fdp = -1
	r.kept--
	if !hot {
		r.warmKept--
	}
}

// read returns the content of a task file (pid's when tid is 0) in r.buf,
// through *fdp when it is kept. Otherwise it opens the file, and keeps it in
// *fdp when fdp is not nil and the budget allows.
func (r *Reader) read(fdp *int, hot bool, pid, tid int32, name string) ([]byte, error) {
	fd, transient, err := r.ensure(fdp, hot, pid, tid, name, 0)
	if err != nil {
		return nil, err
	}
	r.stats.Reads++
	n, err := rawPread(fd, r.buf, 0)
	if transient {
		rawClose(fd)
	}
	if err != nil {
		return nil, classify(err)
	}
	return r.buf[:n], nil
}

// readCmdline reads pid's command line into r.buf through an ordinary
// pread (see sys_linux.go): the kernel copies it from the process's memory
// under its mmap_lock.
func (r *Reader) readCmdline(pid int32) ([]byte, error) {
	fd, _, err := r.ensure(nil, false, pid, 0, "cmdline", 0)
	if err != nil {
		return nil, err
	}
	r.stats.Reads++
	n, err := unix.Pread(fd, r.buf, 0)
	rawClose(fd)
	if err != nil {
		return nil, classify(err)
	}
	return r.buf[:n], nil
}

// ensure returns a descriptor for the file; transient means the caller must
// close it after use.
func (r *Reader) ensure(fdp *int, hot bool, pid, tid int32, name string, flags int) (fd int, transient bool, err error) {
	if fdp != nil && *fdp >= 0 {
		return *fdp, false, nil
	}
	r.setPath(pid, tid, name)
	r.stats.Opens++
	fd, err = openBytes(r.path, unix.O_RDONLY|flags)
	if err != nil {
		return -1, false, classify(err)
	}
	if fdp == nil || r.kept >= r.max || (!hot && r.warmKept >= r.warmBudget()) {
		return fd, true, nil
	}
	*fdp = fd
	r.kept++
	if !hot {
		r.warmKept++
	}
	return fd, false, nil
}

// setPath puts ROOT/PID[/task/TID]/NAME, NUL-terminated, in r.path.
func (r *Reader) setPath(pid, tid int32, name string) {
	r.path = append(r.path[:0], r.root...)
	r.path = append(r.path, '/')
	r.path = strconv.AppendInt(r.path, int64(pid), 10)
	if tid != 0 {
		r.path = append(r.path, "/task/"...)
		r.path = strconv.AppendInt(r.path, int64(tid), 10)
	}
	r.path = append(r.path, '/')
	r.path = append(r.path, name...)
	r.path = append(r.path, 0)
}

// openBytes is openat(AT_FDCWD) on a NUL-terminated path held in a reused
// buffer: unix.Open takes a string and would allocate a copy on every call.
func openBytes(path []byte, flags int) (int, error) {
	dirfd := unix.AT_FDCWD
	fd, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd),
		uintptr(unsafe.Pointer(&path[0])), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func classify(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		return errGone
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return errDenied
	}
	return err
}
