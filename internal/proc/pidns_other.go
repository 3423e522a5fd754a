//go:build !linux

package proc

// LocalPID returns pid: PID namespaces are Linux's.
func (fs FS) LocalPID(pid int) (int, error) { return pid, nil }
