package proc

// Options configure a Reader. The zero value reads every process under /proc.
type Options struct {
	// Root is the procfs mount point, "/proc" when empty. Tests point it at
	// fixtures under testdata/.
	Root string
	// MaxFDs caps the /proc descriptors kept open between refreshes (default
	// 4096). Each costs the kernel about 4 KiB of memory once read. Beyond
	// the cap, files are opened, read and closed each time.
	MaxFDs int
	// PIDs, when set, restricts the reader to these processes and their
	// threads; /proc itself is not scanned.
	PIDs []int
	// SkipKernelThreads leaves kernel threads out (and unread).
	SkipKernelThreads bool
	// DeferNew, on a whole-host reader, reads a process that appears after
	// the first Snapshot by its stat alone (CPU, RSS, state, comm; with
	// TasksFromBPF, by its task iterator records and no file) until it
	// is seen again: most processes a busy host starts exit within a second,
	// and reading their threads, descriptors, limits and command line cost
	// about 30 syscalls each. Such a process lacks KnownCtxsw, KnownFDs and
	// KnownExe in its first Snapshot, and Rates take the next reading as
	// its threads' baseline.
	DeferNew bool
	// LateIdentity, on a whole-host reader, reads a process that appears
	// after the first Snapshot in full at first sight but for what
	// identifies it (command line, cgroup, executable) and its descriptor
	// count, which wait until it is seen again. Unlike DeferNew its CPU
	// times, threads and switch counts are known at first sight, so a
	// process that lives less than an interval still counts; such a
	// process lacks KnownExe and KnownFDs (FDs -1) in its first Snapshot.
	// Under 5,000 new processes a second, those reads were 60% of the
	// exporter's CPU, for processes it puts in its short-lived group
	// anyway.
	LateIdentity bool
	// FullEvery re-reads each process's stat and limits once in this many
	// refreshes (default 10) even when none of its threads ran, because RSS
	// (under reclaim) and limits (prlimit) change without the process
	// running. Everything else is read only for threads that ran.
	FullEvery int
	// IdleBackoff, above 1, checks a thread that has not run for that many
	// refreshes in a row only once in that many refreshes (at a phase set
	// by its TID, so the checks spread evenly), until it runs again. On a
	// host of mostly sleeping threads a refresh then reads a fraction of
	// the files, at the price of seeing a long-idle thread start running up
	// to IdleBackoff refreshes late: its counters are exact, only late.
	// It suits a view whose figures are read over many refreshes (the
	// exporter, scraped every 15 s or more), not a live view. Limits, which
	// only prlimit changes, are then re-read once in IdleBackoff full
	// passes. 0 or 1: every thread is checked at every refresh.
	IdleBackoff int
	// SwitchesOnly reads a thread that ran by its status alone (its switch
	// counts) and not by its stat too: Task's UTime, STime, State,
	// Processor and Comm stay zero (but with TasksFromBPF, whose records
	// hold them). Processes are read as without it. It
	// suits a view that wants threads only for wake-ups summed per process
	// (the exporter): a thread's stat costs a third of what its status
	// does, and one kept descriptor per thread.
	SwitchesOnly bool
	// NoTasks leaves Snapshot.Tasks empty (TasksOf returns none): threads
	// are read as without it, and summed in their process (VolCtxsw,
	// VolMerged...), but not copied at each refresh, for a view that
	// wants processes only (the exporter, whose copy of 650 threads a
	// sample, and their rates, touched as much memory as the rest of it).
	NoTasks bool
	// SkipIO leaves /proc/PID/io unread: Known never has KnownIO and SyscR,
	// SyscW stay zero. It saves a read (and a kept descriptor) per process
	// that ran, for a view that shows no syscall counts.
	SkipIO bool
	// SkipCmdline leaves /proc/PID/cmdline unread (Proc.Cmdline stays
	// empty), for a view that names processes by comm and cgroup (the
	// exporter). It is the one read of a new process that can block (the
	// kernel copies the command line under the target's mmap_lock) and so
	// the one that goes through the Go scheduler (see sys_linux.go): a
	// host that starts a process a second otherwise wakes the runtime's
	// sysmon at every refresh.
	SkipCmdline bool
	// NewPIDsOnly, on a whole-host reader, lists only the PIDs above the
	// last one /proc/loadavg showed when it shows new processes between
	// full passes, instead of every process: procfs positions its root
	// directory by PID, so the listing starts past the known ones. Listing
	// every process costs about 250 us at 600 processes, and a host that
	// starts a process a second pays it at every refresh. Full passes, a
	// PID counter that wrapped, and a procfs that does not behave so (a
	// fixture tree, another PID namespace's mount) list them all.
	NewPIDsOnly bool
	// IdleStatEvery, above 1, re-reads the stat (RSS) of a process none of
	// whose threads ran once in FullEvery*IdleStatEvery refreshes instead
	// of at every full pass, at a phase set by its PID, so these reads are
	// spread over all refreshes rather than bunched in full passes; its
	// limits are re-read at one in IdleBackoff of those. A process that
	// runs is read as without it. A sleeping process's RSS moves only
	// under reclaim, which is then seen up to that many refreshes late;
	// on a host of mostly sleeping processes, the full passes' stat reads
	// were about half of the exporter's. Under MaxFDs, the descriptors of
	// processes' stat and task directories then yield to the threads'
	// schedstat ones, read far more often. 0 or 1: at every full pass.
	IdleStatEvery int
	// RanFromTaskstats asks the kernel's taskstats (generic netlink, one
	// batched request per refresh) which processes of three threads or more
	// ran, and leaves the threads of those that did not unread: a
	// taskstats answer sums a process's switches and CPU times over its
	// threads, so one answer (about 1.8 us of kernel time) stands for
	// every thread's schedstat read (about 0.7 us each). Single- and
	// two-threaded processes are read as without it, which is cheaper.
	// With IdleBackoff above 1 a process whose answer has not moved for
	// that many refreshes is asked once in that many, as a thread is, and
	// when it has run all its threads are checked at once: its counters
	// are exact, up to IdleBackoff refreshes late, as without it. With
	// SwitchesOnly, a thread that ran is read through taskstats too (its
	// switch counts, as SwitchesFromTaskstats does) instead of its status.
	// It needs CAP_NET_ADMIN, the kernel's TASKSTATS family (the host's
	// network namespace) and a /proc of this process's PID namespace;
	// without them the reader reads as without it and ReadStats.TaskstatsOff
	// says why.
	RanFromTaskstats bool
	// SwitchesFromTaskstats asks the kernel's taskstats for the switch
	// counts of the threads that ran (their schedstat moved), one batched
	// request per refresh, instead of reading each one's status: an answer
	// costs the kernel about 2 us, a status about 8 us for procfs to
	// render, more under a fork storm. The counts are the same fields of
	// the same thread. SwitchesOnly with RanFromTaskstats does so too. It
	// needs what RanFromTaskstats needs; without it the statuses are read
	// and ReadStats.TaskstatsOff says why.
	SwitchesFromTaskstats bool
	// TasksFromBPF, on a whole-host reader, reads every thread with one
	// BPF task iterator a refresh (a read(2) or two of fixed-size records,
	// see iter_linux.go): what each thread's schedstat, status and stat
	// show, and what each process's stat and io show, instead of a
	// schedstat read per thread, a stat and a status read (or taskstats
	// answer) per thread that ran, a stat and an io read per process that
	// ran or is due, and a listing of /proc: new processes and threads are
	// found in its records. Every thread is then read at every refresh
	// (IdleStatEvery, RanFromTaskstats, SwitchesFromTaskstats and
	// SwitchesOnly have nothing left to save), and every process's RSS is
	// current at every refresh, but with IdleBackoff above 1 (and
	// NewPIDsOnly): the iterator then walks every task once in IdleBackoff
	// refreshes only, and in between reads the threads of the processes
	// that ran in the last IdleBackoff reads (by TID, one bpf(2) call for
	// all) and of the new ones (a link per process, the iterator's pid
	// option), so a process that sleeps longer is seen running again, a
	// thread it creates and its exit up to IdleBackoff refreshes late, its
	// counters exact. The walk of every
	// task costs the kernel about 0.9 ms at 650 tasks (the task
	// structures have gone cold in a second), more than the rest of an
	// exporter's sample. What is left for files:
	// the descriptor count (an fstat) of a process that ran, the limits
	// at full passes, the identity of a new process (cgroup, executable,
	// command line) and a task listing when its threads change. It needs
	// root (or CAP_BPF and CAP_PERFMON), kernel BTF and gosleuth in the
	// initial PID namespace with its /proc; without them the reader reads
	// as without it and ReadStats.TasksFromBPFOff says why.
	TasksFromBPF bool
}
