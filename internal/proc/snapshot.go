package proc

import "time"

// ClockTicks is USER_HZ, the unit of the times in /proc/PID/stat. Linux
// exports it as 100 on every architecture gosleuth supports, whatever the
// kernel's internal HZ.
const ClockTicks = 100

// Known bits say which of a Proc's optional fields could be read.
type Known uint8

// The optional fields of a Proc.
const (
	KnownFDs     Known = 1 << iota // FDs (needs access to /proc/PID/fd)
	KnownFDLimit                   // FDLimit
	KnownIO                        // SyscR, SyscW (needs access to /proc/PID/io)
	KnownExe                       // GoVersion was decided from the executable
	KnownCtxsw                     // VolCtxsw, InvolCtxsw
)

// Task is one thread's cumulative counters.
type Task struct {
	TID   int32
	Comm  string
	State byte
	// UTime and STime are CPU time in user and kernel mode, in ClockTicks.
	// The one thread of a single-threaded process is given its process's
	// stat figures (State, Comm, Processor, UTime, STime) rather than
	// read on its own: the same counters, except that the process's times
	// also hold those of threads that exited before, which a rate (a
	// difference) cancels out.
	UTime, STime uint64
	// VolCtxsw counts voluntary switches (the thread blocked: each one is a
	// wake-up later); InvolCtxsw counts preemptions.
	VolCtxsw, InvolCtxsw uint64
	// RunNS is time on CPU and WaitNS time runnable but waiting for a CPU,
	// from schedstat; Slices counts the times it was scheduled in.
	RunNS, WaitNS, Slices uint64
	// Processor is the CPU the thread last ran on.
	Processor int32
	// procTimes: UTime and STime are the process's (see UTime). Rates
	// give no CPU for a thread whose times changed source between two
	// readings.
	procTimes bool
}

// Proc is one process's cumulative counters and facts.
type Proc struct {
	PID, PPID int32
	UID       uint32
	Comm      string
	// Cmdline is the command line with arguments separated by spaces; empty
	// for kernel threads and zombies.
	Cmdline string
	// Cgroup is the process's cgroup path, read when it is first seen and
	// at exec: the unified (v2) path, else the name=systemd or cpu
	// controller's v1 path ("/system.slice/ssh.service"); "" when unknown.
	Cgroup string
	State  byte
	// Kernel is true for kernel threads.
	Kernel bool
	// UTime, STime are the process's CPU time (all threads, including exited
	// ones), CUTime, CSTime those of its waited-for children, in ClockTicks.
	UTime, STime, CUTime, CSTime uint64
	// MinFlt and MajFlt count page faults.
	MinFlt, MajFlt uint64
	// StartTime is when the process started, in ClockTicks after boot; with
	// the PID it identifies the process across PID reuse.
	StartTime uint64
	RSSBytes  uint64
	Threads   int32
	// FDs is the number of open descriptors, FDLimit the process's own soft
	// RLIMIT_NOFILE (Unlimited when unlimited). See Known.
	FDs     int32
	FDLimit int64
	// VolCtxsw, InvolCtxsw are summed over the live threads.
	VolCtxsw, InvolCtxsw uint64
	// VolMerged and InvolMerged are the same switches merged by thread:
	// at the first reading with KnownCtxsw their sums over the live
	// threads, then increased by each thread's increase since it was last
	// read, in full for a thread created since, so that a thread's exit
	// does not take back its switches (as Rates counts them). Their
	// difference between two readings of a process that both have
	// KnownCtxsw is the Vol and Invol that Rates gives for it.
	VolMerged, InvolMerged uint64
	// RunMerged is RunNS merged by thread the same way: the threads' time
	// on CPU from schedstat, which a thread's exit does not take back.
	RunMerged uint64
	// SyscR, SyscW count read-like and write-like syscalls (from io).
	SyscR, SyscW uint64
	// RunNS, WaitNS are schedstat times summed over the live threads.
	RunNS, WaitNS uint64
	// GoVersion is the Go release the executable was built with ("go1.26.0"),
	// empty when it is not a Go binary or could not be read (see Known).
	GoVersion string
	// Known says which optional fields were readable.
	Known Known
	// taskLo, taskHi index the process's threads in Snapshot.Tasks.
	taskLo, taskHi int32
}

// Snapshot is one reading of a set of processes and, when asked, their
// threads. Procs are sorted by PID and each process's Tasks by TID. A Reader
// fills a Snapshot in place, reusing its slices.
type Snapshot struct {
	// Time is when the reading finished (with a monotonic clock reading).
	Time  time.Time
	Procs []Proc
	Tasks []Task
	// Stats describes the reader's own work for this snapshot.
	Stats ReadStats
}

// TasksOf returns p's threads, sorted by TID. p must belong to s.
func (s *Snapshot) TasksOf(p *Proc) []Task {
	return s.Tasks[p.taskLo:p.taskHi]
}

// TaskRange returns the bounds of p's threads in s.Tasks (and in the
// parallel Rates.Tasks).
func (s *Snapshot) TaskRange(p *Proc) (lo, hi int) {
	return int(p.taskLo), int(p.taskHi)
}

// Find returns the process with pid, or nil.
func (s *Snapshot) Find(pid int32) *Proc {
	lo, hi := 0, len(s.Procs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.Procs[m].PID < pid {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(s.Procs) && s.Procs[lo].PID == pid {
		return &s.Procs[lo]
	}
	return nil
}

// ReadStats counts what one refresh cost and found.
type ReadStats struct {
	// KeptFDs is the number of /proc descriptors held open after the refresh,
	// MaxFDs the cap on them.
	KeptFDs, MaxFDs int
	// Opens counts files opened in this refresh (new tasks, or beyond the cap).
	Opens int
	// Reads counts pread and getdents calls in this refresh.
	Reads int
	// Rescans counts directory rescans (of /proc or a task directory).
	Rescans int
	// Listed counts the PIDs listed by rescans of /proc.
	Listed int
	// Changed counts tasks whose stat and status were read because they ran.
	Changed int
	// Idle counts threads not checked in this refresh (Options.IdleBackoff).
	Idle int
	// TaskstatsAsked counts the processes asked about through taskstats
	// (Options.RanFromTaskstats), TaskstatsStill those whose threads were
	// left unread because none ran (or, under IdleBackoff, none ran for a
	// while and they were not due). TaskstatsLost is true when replies
	// were dropped (a full socket buffer): those processes were read as
	// without taskstats.
	TaskstatsAsked, TaskstatsStill int
	TaskstatsLost                  bool
	// TaskstatsThreads counts the threads that ran whose switch counts
	// were asked through taskstats (Options.SwitchesFromTaskstats) rather
	// than read from their status.
	TaskstatsThreads int
	// TaskstatsOff, with Options.RanFromTaskstats, says why taskstats is
	// not in use (every thread is then read as without it); empty when it
	// is, or was not asked for.
	TaskstatsOff string
	// Iterated counts the threads the task iterator returned
	// (Options.TasksFromBPF), TasksFromBPFOff says why it is not in use
	// (empty when it is, or was not asked for). IterPartial is true when
	// the iterator read the threads of IteratedProcs processes only, not
	// every task (see Options.IdleBackoff).
	Iterated        int
	IterPartial     bool
	IteratedProcs   int
	TasksFromBPFOff string
	// Full is true when every file was re-read regardless of change.
	Full bool
	// Denied is true when some files could not be read for lack of permission.
	Denied bool
	// Duration is the wall time the refresh took.
	Duration time.Duration
}
