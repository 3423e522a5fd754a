// Package window is the middle layer of gosleuth (docs/design.md: sources
// -> window -> views): it turns what the sources read (/proc readings, syscall
// counts, stack samples, runtime metrics, probe counts) into a Window, what
// one process did over [Start, End], and a Host, the machine it ran on. A
// Builder fed successive /proc readings is the one place that turns two
// readings into "what happened", with proc.Rates' semantics: switches of
// threads that exit inside the window are kept. Views (the doctor, load's
// target watch, the exporter, the web page) read windows; they compute no
// deltas of their own. A Window is not changed once built.
package window

import (
	"cmp"
	"slices"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Source names a kind of evidence a window may carry.
type Source string

// The sources a window can be built from.
const (
	SourceProc     Source = "proc"     // /proc counters, always present
	SourceSyscalls Source = "syscalls" // exact per-syscall counts
	SourceStacks   Source = "stacks"   // user + kernel stack samples
	SourceRuntime  Source = "runtime"  // Go runtime metrics (agent, pprof, expvar, go_* metrics)
	SourceProbes   Source = "probes"   // exact call counts and callers of Go functions (entry uprobes)
	SourceFDs      Source = "fds"      // listings of the descriptors, catching files opened and closed between them
)

// Host describes the machine the windows were taken on.
type Host struct {
	// CPUs is the number of online CPUs.
	CPUs int
	// Procs and Tasks count the processes and threads seen.
	Procs, Tasks int
	// Start and End bound the observation.
	Start, End time.Time
	// Root is true when gosleuth ran as root: the reasons given for rules
	// left undecided must not then say "run as root".
	Root bool
}

// Point is one reading of a process's levels, T seconds after the window
// started.
type Point struct {
	T       float64
	RSS     uint64
	FDs     int32
	Threads int32
}

// Window is what was observed of one process over [Start, End]. Counter
// fields are deltas over the window. Optional sources are nil when they were
// not taken.
type Window struct {
	PID     int
	Comm    string
	Cmdline string
	// GoVersion is the Go release of the executable ("go1.26.8"), empty for
	// other programs or when the executable was unreadable.
	GoVersion string
	// Container is the container the process's cgroup path names; nil on
	// the host.
	Container *proc.Container
	Start     time.Time
	End       time.Time
	// Exited is true when the process went away before the window ended.
	Exited bool

	// UserSec and SysSec are the process's CPU seconds in user and kernel
	// mode: the threads' schedstat run time (RunSec) split by the clock
	// ticks' ratio when RunKnown, else the clock ticks themselves.
	// ChildUserSec and ChildSysSec are those of children reaped in the
	// window (clock ticks: a reaped child has no threads left to read).
	UserSec, SysSec           float64
	ChildUserSec, ChildSysSec float64
	// QuietSec, when positive, is the time over which UserSec and SysSec
	// were measured with nothing of gosleuth attached to the process
	// (CollectConfig.QuietCPU): they are that CPU at its rate over the
	// whole window, not what the process used while gosleuth's close looks
	// ran in it.
	QuietSec float64
	// TickUserSec and TickSysSec are the clock-tick counters' user and
	// kernel time: the kernel charges a whole 10 ms tick to one or the
	// other by where it lands, so they tell the split, not the amount.
	TickUserSec, TickSysSec float64
	// RunSec is the threads' time on CPU from schedstat, in nanoseconds
	// summed by thread ID (threads that exit keep what they ran up to
	// their last reading), when RunKnown: every reading in the window had
	// the process's threads.
	RunSec   float64
	RunKnown bool
	// lifeUser and lifeSys are the process's clock ticks since it started,
	// which split RunSec when no tick landed in the window.
	lifeUser, lifeSys float64
	// VolCtxsw counts voluntary context switches over all threads (each one
	// is a wake-up later); InvolCtxsw counts preemptions.
	VolCtxsw, InvolCtxsw uint64
	// IOCalls counts read- and write-like syscalls (/proc/PID/io syscr +
	// syscw), -1 when io was unreadable; ReadCalls and WriteCalls are its
	// two parts.
	IOCalls               int64
	ReadCalls, WriteCalls uint64
	// RunQueueSec is time threads spent runnable but waiting for a CPU.
	RunQueueSec float64
	// FDLimit is the process's own soft RLIMIT_NOFILE, 0 when unknown,
	// negative when unlimited. FDsKnown says whether Series has fd counts.
	FDLimit  int64
	FDsKnown bool
	// Series holds the levels read during the window, oldest first.
	Series []Point
	// ChildrenSeen counts child processes that appeared during the window
	// (short-lived ones may be missed; their CPU is in ChildUserSec).
	ChildrenSeen int
	// ReapShare is the fraction of /proc readings in which the children's
	// CPU grew: near 1 when children are started and reaped all the time,
	// low when one long child (a build under a shell) finished.
	ReapShare float64
	// intervals counts the readings after the first, reaps those in which
	// the children's CPU grew: ReapShare's parts, for Between and Join.
	intervals, reaps int
	// AllowedCPUs is the size of the process's CPU affinity mask, 0 when
	// unknown.
	AllowedCPUs int

	// NotLooked is true when close looks ran on this host but not on this
	// process (it did not look suspicious enough).
	NotLooked bool

	// Go holds facts about a Go program's runtime settings, nil if unknown.
	Go *GoFacts
	// Syscalls holds exact syscall counts, nil if not counted.
	Syscalls *Syscalls
	// Stacks holds a summary of stack samples, nil if not sampled.
	Stacks *Stacks
	// Runtime holds runtime metrics over the window, nil if not read.
	Runtime *Runtime
	// Probes holds exact call counts of Go functions, nil if not probed.
	Probes *Probes
	// Files holds the files caught open between listings of the
	// descriptors, nil if not listed.
	Files *Files
}

// Files names the files a process opened in part of the window: exactly,
// from its openat calls (a BPF program on the syscall's tracepoint), or,
// without BPF, from repeated listings of its descriptors, which catch a
// file opened and closed thousands of times a second now and then (and a
// file kept open never).
type Files struct {
	// Method is "openat" (every call counted) or "listings".
	Method string
	// Seconds is how long the look ran; Listings how many listings it made
	// (0 with openat).
	Seconds  float64
	Listings int
	// Caught counts the files opened (openat) or caught open (listings),
	// and Paths shares them by path, largest first (at most 10).
	Caught int
	Paths  []Share
	// Opens counts every openat call of the thread group (openat only:
	// paths unreadable or beyond the kept ones included).
	Opens uint64
}

// OpensPerSec is the thread group's openat calls per second, exact, and
// false when they were not counted (listings only see some).
func (f *Files) OpensPerSec() (float64, bool) {
	if f == nil || f.Method != "openat" || f.Seconds <= 0 {
		return 0, false
	}
	return float64(f.Opens) / f.Seconds, true
}

// Top returns the path caught most often and its share of the files
// caught, or "" when fewer than min were caught.
func (f *Files) Top(min int) (string, float64) {
	if f == nil || f.Caught < min || len(f.Paths) == 0 {
		return "", 0
	}
	return f.Paths[0].Name, f.Paths[0].Share
}

// Probes holds exact counts of calls to Go functions, from entry uprobes,
// over part of the window.
type Probes struct {
	// Seconds is how long the probes were attached.
	Seconds float64
	// Calls maps a probed function ("runtime.newproc", "time.Sleep") to its
	// calls; a function absent was not probed.
	Calls map[string]ProbeCalls
	// Mechanism names how they were taken.
	Mechanism string
}

// ProbeCalls counts the calls of one function and names their callers.
type ProbeCalls struct {
	Count uint64
	// Callers are the calling sites, Share being the fraction of calls.
	Callers []Site
	// Args are the values of the argument the recipe reads (time.Sleep's
	// duration in ns, lockSlow's mutex address, os.OpenFile's path), with
	// Name the symbol or string it stands for when known, largest share of
	// calls first.
	Args []ProbeArg
	// Entries are, for each of Callers (same index), the function the
	// calling goroutine started in (its outermost frame under
	// runtime.goexit), "" where the sampled stack did not reach it. Set
	// for the parks (LeakParksKey).
	Entries []string `json:",omitempty"`
	// Seconds, when set, is how long this function was probed, in a look
	// of its own after the window's (LeakParksKey); Count is over it.
	Seconds float64 `json:",omitempty"`
	// Duty, when set, says the function was too hot to probe through the
	// window within the budget and was probed in bursts, attached this
	// share of the time: Count is an estimate scaled from the bursts, and
	// the callers and arguments are the bursts'.
	Duty float64 `json:",omitempty"`
}

// ProbeArg is one value of a probed argument and its share of calls.
type ProbeArg struct {
	Value uint64
	Name  string
	Share float64
}

// Rate returns the calls per second of fn, and false when fn was not
// probed.
func (p *Probes) Rate(fn string) (float64, bool) {
	if p == nil || p.Seconds <= 0 {
		return 0, false
	}
	c, ok := p.Calls[fn]
	if !ok {
		return 0, false
	}
	return float64(c.Count) / p.Seconds, true
}

// GoFacts are a Go program's runtime settings.
type GoFacts struct {
	// GOMAXPROCS is the value the program runs with and GOMAXPROCSFrom says
	// how it was found ("environ", "computed", "runtime").
	GOMAXPROCS     int
	GOMAXPROCSFrom string
}

// Syscalls is an exact syscall count over part of the window.
type Syscalls struct {
	// Seconds is how long the counters were attached.
	Seconds float64
	// Counts maps syscall names ("futex") to calls.
	Counts map[string]uint64
	// Mechanism names how they were counted.
	Mechanism string
}

// Stacks summarises CPU stack samples taken over part of the window.
type Stacks struct {
	// Seconds is how long sampling ran; Samples how many were taken.
	Seconds float64
	Samples int
	// KernelShare is the fraction of samples taken in the kernel.
	KernelShare float64
	// Classes maps runtime classes (ClassGCAssist, ClassScheduler, ...) to
	// their share of samples.
	Classes map[string]float64
	// Packages lists the leaf Go packages by share of samples, largest first.
	Packages []Share
	// Functions lists leaf functions by share of samples, largest first.
	Functions []Share
	// KernelPaths lists kernel entry points (syscalls, faults) by share.
	KernelPaths []Share
	// Callers maps a class to the user functions most often found calling
	// into it, largest first.
	Callers map[string][]Share
	// Sites maps what the rules ask about (a class such as "lock" or
	// "gc-assist", "timer" for timer and sleep paths, "syscall openat" for
	// a kernel entry) to the code responsible: the program's own frame
	// nearest the leaf (its function and the line of the call), largest
	// share of all samples first.
	Sites map[string][]Site
	// LibCalls lists calls from the program's own code into a library (the
	// standard library or another module), by the cumulative share of all
	// samples taken under them, largest first.
	LibCalls []LibCall
	// Serving is the share of samples taken on a server's request path
	// (net/http's connection and HTTP/2 handler goroutines, gRPC's stream
	// handlers): more than a trace of it says the process served requests
	// in the window, so work that scales with them is the requests' work.
	Serving float64
}

// Site is a place in the code and the share of samples found there.
type Site struct {
	Func  string  `json:"func"`
	File  string  `json:"file,omitempty"`
	Line  int     `json:"line,omitempty"`
	Share float64 `json:"share"`
}

// LibCall is a call from the program's own code (Caller, at the line of
// the call) into a library function (Callee), with the cumulative share of
// all samples under it and, below it, the leaf functions that share falls
// in (largest first).
type LibCall struct {
	Callee string  `json:"callee"`
	Caller Site    `json:"caller"`
	Share  float64 `json:"share"`
	Leaves []Share `json:"leaves,omitempty"`
}

// Share is a name and its fraction of samples.
type Share struct {
	Name  string  `json:"name"`
	Share float64 `json:"share"`
}

// Runtime holds Go runtime metrics over the window (from inside the
// process: agent, pprof endpoint, expvar or go_* metrics).
type Runtime struct {
	// From names the source ("agent", "pprof", "metrics", "expvar").
	From string
	// Seconds is the span between the two readings.
	Seconds float64
	// Goroutines at the start and end of the window.
	GoroutinesStart, GoroutinesEnd float64
	// GCCycles ended in the window; GCCPUShare and AssistShare are the
	// fractions of the process's CPU spent in GC and in mark assist (NaN
	// when fewer than two cycles ended).
	GCCycles    float64
	GCCPUShare  float64
	AssistShare float64
	// SchedLatP99 is the 99th percentile scheduling latency in seconds (NaN
	// when unknown); MutexWaitPerSec seconds of mutex wait per second.
	SchedLatP99     float64
	MutexWaitPerSec float64
	// HeapLive and HeapObjects at the end of the window (NaN when unknown).
	HeapLive, HeapObjects float64
	// Groups are the largest groups of goroutines with one stack and one
	// creator, from a goroutine dump taken at the end of the window when
	// the count rose (nil otherwise, or when the source has no dump).
	Groups []GoroutineGroup
	// Books is what the runtime's own books in the process's memory said
	// at the window's start and end (looks_books.go), nil when its memory
	// could not be read.
	Books *Books
}

// GoroutineGroup is a group of goroutines with the same stack and creator.
type GoroutineGroup struct {
	Count int
	// State is the most common wait reason ("chan receive").
	State string
	// WaitsIn is the program's frame nearest the top of the stack (where
	// they block); CreatedBy the go statement that started them.
	WaitsIn, CreatedBy Site
}

// Seconds is the window's length.
func (w *Window) Seconds() float64 { return w.End.Sub(w.Start).Seconds() }

// CPUSec is the process's own CPU seconds (user + system): the schedstat
// run time where it is known, exact to the nanosecond, else the clock
// ticks. It is gosleuth's one definition of a process's CPU.
func (w *Window) CPUSec() float64 { return w.UserSec + w.SysSec }

// splitCPU sets UserSec and SysSec from the run time and the ticks.
func (w *Window) splitCPU() {
	w.UserSec, w.SysSec = w.TickUserSec, w.TickSysSec
	if w.RunKnown {
		w.UserSec, w.SysSec = proc.SplitCPU(w.RunSec, w.TickUserSec, w.TickSysSec, w.lifeUser, w.lifeSys)
	}
}

// Cores is the average number of CPUs the process used (1.0 = one core).
func (w *Window) Cores() float64 { return PerSec(w.CPUSec(), w.Seconds()) }

// AtQuietRate gives w the CPU measured over sec seconds with nothing of
// gosleuth attached (user and sys seconds), at that rate over over seconds
// of the window, and records sec in QuietSec.
func (w *Window) AtQuietRate(sec, user, sys, over float64) {
	scale := over / sec
	w.UserSec, w.SysSec, w.QuietSec = user*scale, sys*scale, sec
}

// WakeupsPerSec is voluntary context switches per second.
func (w *Window) WakeupsPerSec() float64 { return PerSec(float64(w.VolCtxsw), w.Seconds()) }

// Threads is the last thread count seen, 0 when none was.
func (w *Window) Threads() int {
	if len(w.Series) == 0 {
		return 0
	}
	return int(w.Series[len(w.Series)-1].Threads)
}

// IsGo reports whether the process is a Go program.
func (w *Window) IsGo() bool { return w.GoVersion != "" }

// Rate returns calls per second of the named syscalls, and false when
// syscalls were not counted.
func (s *Syscalls) Rate(names ...string) (float64, bool) {
	if s == nil || s.Seconds <= 0 {
		return 0, false
	}
	var n uint64
	for _, name := range names {
		n += s.Counts[name]
	}
	return float64(n) / s.Seconds, true
}

// Total is the number of syscalls counted.
func (s *Syscalls) Total() uint64 {
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// PerSec is v per second over sec seconds, 0 over an empty span.
func PerSec(v, sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	return v / sec
}

// SortShares orders shares largest first, then by name.
func SortShares(s []Share) {
	slices.SortFunc(s, func(a, b Share) int {
		if c := cmp.Compare(b.Share, a.Share); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
}
