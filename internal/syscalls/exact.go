package syscalls

import "github.com/gosleuth/gosleuth/internal/proc"

// CountedNames are the syscalls the views count by name: the ones that tell
// waiting and waking (futex, epoll, sleeps) from I/O (reads, writes,
// sockets) and from churn (opens, clones, signals, memory mappings), which
// the doctor's rules, the web page's chart and compare's syscall windows
// read. A few dozen tracepoints rather than all ~360 keep attaching and
// releasing short: the kernel frees each tracepoint event after an RCU
// grace period, about 30 ms apiece.
var CountedNames = []string{
	"futex", "epoll_pwait", "epoll_pwait2", "epoll_wait", "epoll_ctl", "poll", "ppoll", "pselect6",
	"nanosleep", "clock_nanosleep", "sched_yield",
	"read", "pread64", "readv", "recvfrom", "recvmsg",
	"write", "pwrite64", "writev", "sendto", "sendmsg",
	"open", "openat", "openat2", "close", "fstat", "newfstatat", "statx", "fcntl",
	"accept4", "getsockopt", "setsockopt",
	"clone", "clone3", "execve", "wait4", "waitid",
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "tgkill", "getpid", "getrandom",
	"mmap", "munmap", "madvise",
}

// Mechanism is how an Exact counter counts.
type Mechanism int

const (
	// Tracepoints counts with per-task counting perf events on each
	// named syscall's tracepoint (see Counter): only the target pays,
	// about a microsecond a call, but it needs a descriptor per syscall
	// and thread, and releasing costs a grace period per tracepoint.
	Tracepoints Mechanism = iota
	// BPF counts with one BPF program on raw_syscalls:sys_enter (see
	// BPFCounter): no descriptor per thread, one grace period to release,
	// a few tens of nanoseconds on every syscall of the host.
	BPF
)

// ExactOptions configures CountExact.
type ExactOptions struct {
	// FS is the procfs the target's threads are listed from (the zero FS
	// is /proc).
	FS proc.FS
	// Names are the syscalls counted by name (CountedNames when nil).
	Names []string
	// Mechanism is the mechanism to use. With Tracepoints, a target with
	// too many threads for one descriptor per syscall and thread is
	// counted with BPF instead.
	Mechanism Mechanism
	// Total counts every syscall too, for Reading.Total (free with BPF,
	// one more event per thread with tracepoints).
	Total bool
}

// Reading is what an Exact counter counted since it was attached.
type Reading struct {
	// ByName holds every counted name, 0 when it was not called.
	ByName map[string]uint64
	// Total is every syscall of the target, named or not (0 unless
	// ExactOptions.Total was set).
	Total uint64
}
