package doctor

// SyscallsLook counts a chosen set of syscalls exactly with per-task
// tracepoint counters (root only; Linux only).
type SyscallsLook struct{}

// Source implements Look.
func (SyscallsLook) Source() Source { return SourceSyscalls }
