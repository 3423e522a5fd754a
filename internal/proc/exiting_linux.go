package proc

import (
	"errors"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pfExiting is PF_EXITING in the stat flags field, set first thing in a
// task's exit.
const pfExiting = 0x4

// Exiting reports whether process pid of this host has begun to exit or is
// gone: its main thread's stat flags have PF_EXITING. The kernel sets it
// before it closes the process's descriptors, which can take seconds (each
// syscall tracepoint's last event waits a grace period), so a copy of
// gosleuth that holds events for it learns of its end this way long before
// a socket's end of file. It reads the host's /proc, not a --proc root: it
// is for gosleuth's own processes. A stat it cannot read for another
// reason, or parse, says no.
func Exiting(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	var s statFields
	if parseStat(b, &s) != nil {
		return false
	}
	return s.Flags&pfExiting != 0
}
