//go:build unix

package agent

import (
	"io/fs"
	"syscall"
)

func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// processExists reports whether a process with this PID exists (in this
// process's PID namespace); signal 0 checks without sending anything.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
