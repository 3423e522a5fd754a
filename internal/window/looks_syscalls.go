package window

// SyscallsLook counts a chosen set of syscalls exactly with per-task
// tracepoint counters (root only; Linux only).
type SyscallsLook struct {
	// ProcRoot is the procfs mount the target is read through ("" is /proc).
	ProcRoot string
}

// Source implements Look.
func (SyscallsLook) Source() Source { return SourceSyscalls }
