package syscalls

import (
	"errors"
	"io"
	"time"
)

// ErrNotFound reports that the target process does not exist.
var ErrNotFound = errors.New("not found")

// Config is what "gosleuth syscalls" was asked to do.
type Config struct {
	// PID is the process to count; Command, when set instead, is run to
	// completion and counted with its children.
	PID     int
	Command []string
	// Duration is the window (0 with Command: until it exits).
	Duration time.Duration
	// Threads reports each thread's own counts.
	Threads bool
	// Errors counts failed calls by errno, and Latency times every call,
	// with per-thread sampling events (exact mode only; opt-in: they cost
	// the target more than counting).
	Errors, Latency bool
	// Only restricts counting to these syscall names (plus an exact total
	// of all syscalls); empty counts every syscall the kernel has.
	Only []string
	// Mode is "auto", "exact" (fail rather than fall back) or "proc".
	Mode string
	// ProcRoot is the proc mount ("" is /proc).
	ProcRoot string
	// Stdin is given to Command.
	Stdin io.Reader
}

// ErrUnknownSyscall reports a syscall name that has no tracepoint here.
var ErrUnknownSyscall = errors.New("no such syscall tracepoint on this kernel")

// Event is one counted tracepoint: a syscall's syscalls:sys_enter_NAME
// (Nr -1 when the table does not know the name) or, with Raw, every
// syscall (raw_syscalls:sys_enter, Name "all").
type Event struct {
	Name string
	Nr   int
	ID   uint64
	Raw  bool
}
