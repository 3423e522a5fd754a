package stacks

import (
	"errors"
	"time"
)

// ErrNotSupported reports that stack sampling is not available on this OS.
var ErrNotSupported = errors.New("stack sampling needs Linux")

// ErrNotFound reports that the target process does not exist.
var ErrNotFound = errors.New("process not found")

// Mode says where a sample was taken.
type Mode uint8

// The modes of a sample.
const (
	ModeUser Mode = iota
	ModeKernel
)

// String returns "user" or "kernel".
func (m Mode) String() string {
	if m == ModeKernel {
		return "kernel"
	}
	return "user"
}

// Stack is one distinct call stack of one thread and its sample count.
type Stack struct {
	TID  int
	Mode Mode
	// Kernel and User are the addresses, leaf first. Return addresses are
	// as pushed (the symbolizer looks up address-1 for all but the first).
	Kernel, User []uint64
	// Count is the number of samples.
	Count int64
	// LeafFixed is true when User[1] was recovered from the user stack
	// (the caller of a frameless leaf, which the kernel's walk skipped).
	LeafFixed bool
	// OffCPU marks a stack where the thread blocked (switched out); OffNS
	// is then the estimated time it stayed off CPU, and Count the switches
	// it stands for.
	OffCPU bool
	OffNS  int64
	// Synthetic marks the "[kernel time, not sampled]" stacks of a
	// user-only profile; Count is then derived from /proc system time.
	Synthetic bool
}

// CPUTime is a process's CPU time from /proc over the profile window.
type CPUTime struct {
	User, System time.Duration
	// Known is false when /proc could not be read at both ends.
	Known bool
}

// Raw is what a sampling run collected, before symbolization.
type Raw struct {
	PID    int
	Exe    string // the target's executable path as the kernel shows it
	Hz     int
	Period time.Duration // CPU time one sample stands for
	Start  time.Time
	End    time.Time
	Stacks []*Stack
	// Threads names each sampled thread (its comm).
	Threads map[int]string
	// Samples counts real samples (synthetic ones excluded); Lost those the
	// kernel dropped because a ring was full.
	Samples, Lost int64
	// ThreadsSeen counts the threads sampled over the run.
	ThreadsSeen int
	// PerCPU is true when one event per CPU sampled every task there (root)
	// for the run or from some point on, false when each thread had its
	// own event throughout.
	PerCPU bool
	// UserOnly is true when kernel mode could not be sampled.
	UserOnly bool
	// CPU is /proc's user and system time over the window the samples in
	// WindowSamples fall into.
	CPU           CPUTime
	WindowSamples int64
	// Exited is true when the target exited before the end.
	Exited bool
	// NewThreads counts threads that started during the run, and PickupMax
	// is the longest any of them ran before its event was open (from its
	// start time in /proc, so to within 10 ms).
	NewThreads int
	PickupMax  time.Duration
	// PollLate is the longest any poll for new threads finished after it
	// was due (the sampler's goroutine waiting for a CPU, and the poll's
	// own work): a new thread waits for a poll up to the poll interval
	// plus that.
	PollLate time.Duration
	// LeafFixed counts samples whose missing caller of a frameless leaf
	// was put back from the user stack.
	LeafFixed int64
	// OffCPU holds the off-CPU stacks when asked for: every OffCPUEvery-th
	// switch-out of OffCPUSwitches recorded was sampled; OffCPULost
	// records were dropped.
	OffCPU                     []*Stack
	OffCPUEvery                int
	OffCPUSwitches, OffCPULost int64
	OffCPUAll                  bool
	// Notes are things the reader of the profile should know.
	Notes []string

	maps []mapping
}

// Options configure a sampling run.
type Options struct {
	// PID is the process to sample; its threads are followed as they come
	// and go.
	PID int
	// Hz is the sampling frequency per thread of CPU time (default 99).
	Hz int
	// Duration bounds the run; 0 runs until the context is done or the
	// process exits.
	Duration time.Duration
	// PerThread and PerCPU choose the events. By default the sampler opens
	// one event per thread (the only kind without root: every 10 ms of a
	// thread's CPU gives one sample, so coverage is exact), and moves to one
	// event per CPU filtered to the target (root) after about 0.4 s if the
	// target blocks and wakes (voluntary context switches) so often that
	// per-thread events would cost it more than 1% of its CPU: each costs its thread a timer reprogramming at
	// every context switch. Per-CPU events cost nothing per switch and see
	// new threads at once; their sample counts are statistical (binomial)
	// rather than exact.
	PerThread, PerCPU bool
	// UserOnly forces user-mode sampling, as without privileges.
	UserOnly bool
	// Progress, when set, is called about once a second.
	Progress func(Progress)
	// OffCPU also samples where threads block, at their switch-outs
	// (sched:sched_switch; needs root). OffCPUEvery records one switch in
	// that many (default 1, every switch: about 2 us each).
	OffCPU      bool
	OffCPUEvery int
	// OffCPUAll keeps the off-CPU stacks of idle runtime threads (parked
	// Ms, sysmon, the netpoller), left out by default.
	OffCPUAll bool
	// Started, when set, is called once the first threads' events are open.
	Started func()
	// ProcRoot is the procfs mount the target is read through ("" is
	// /proc): its threads, names, maps and executable.
	ProcRoot string
}

// Progress is the state of a run, for a progress line.
type Progress struct {
	Elapsed          time.Duration
	Samples, Lost    int64
	Threads          int
	UserOnly, Exited bool
}
