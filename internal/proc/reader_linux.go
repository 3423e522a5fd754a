//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"time"

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

// A refresh reads each process in two steps: checkThreads reads every
// thread's schedstat, then (once the switch counts of the threads that ran
// are asked in one batch, askSwitches) finishProc reads the stat and status
// of the threads that ran, then the process files if anything moved.
//
// A thread's CPU times, switch counts and state, and a process's descriptor
// count and io counters, change only when one of its threads runs, which
// moves schedstat. Only RSS (reclaim) and the limits (prlimit from outside)
// change behind a sleeping process's back: a full pass re-reads just those.
