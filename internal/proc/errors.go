package proc

import "errors"

// The error vocabulary every gosleuth command shares. Each is defined on
// every platform so that code on any system can test for it with errors.Is,
// and each command prints one message per condition. The texts read after
// "process PID " ("process 2 is a kernel thread...").
var (
	// ErrProcessGone reports that a process or thread does not exist (never
	// did, or exited).
	ErrProcessGone = errors.New("not found")
	// ErrZombie reports a process that has exited but not been reaped: it
	// has no threads, memory or descriptors left to observe.
	ErrZombie = errors.New("is a zombie (exited, not yet reaped by its parent): nothing left to observe")
	// ErrKernelThread reports a kernel thread: it has no user space, no
	// executable and no Go runtime.
	ErrKernelThread = errors.New("is a kernel thread: it has no user space, executable or Go runtime to observe")
	// ErrNotSupported reports a feature this system or kernel lacks.
	ErrNotSupported = errors.New("not supported on this system")
	// ErrPermission reports that the kernel refused access for lack of
	// privilege. Errors wrapping it carry a hint on how to get the access.
	ErrPermission = errors.New("permission denied")
	// ErrOtherPIDNamespace reports a process with no PID in gosleuth's
	// own PID namespace: the kernel's calls that take a PID (perf events,
	// uprobe links, signals) cannot name it from there.
	ErrOtherPIDNamespace = errors.New("is outside gosleuth's PID namespace: run gosleuth in the host's PID namespace (--pid=host, hostPID) or in the target's")
)
