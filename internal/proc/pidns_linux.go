package proc

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// LocalPID returns the PID that process pid of fs has in this process's
// own PID namespace: the PID perf_event_open(2), BPF links and kill(2)
// take. It is pid itself when fs is a procfs of this namespace. When fs
// is one of an ancestor namespace (a host's /proc seen from a container
// without its own procfs mounted there, say), the NSpid lines of
// /proc/PID/status give it: this process's own line in fs says how many
// levels below fs's namespace it runs, and the target's line then lists its
// PID at that level, if it has one. The answer is checked through a pidfd
// of it, whose fdinfo in fs must name pid; a process of another
// namespace gives ErrOtherPIDNamespace.
func (fs FS) LocalPID(pid int) (int, error) {
	if fs.ownNamespace() {
		return pid, nil
	}
	fail := func(why string) (int, error) {
		if why != "" {
			why = " (" + why + ")"
		}
		return 0, fmt.Errorf("process %d of %s %w%s", pid, fs.Root(), ErrOtherPIDNamespace, why)
	}
	self, err := os.ReadFile(fs.Path("self", "status"))
	if err != nil {
		// This process is not in fs's namespace (fs is a descendant's
		// or an unrelated one's): its PIDs cannot be translated upward.
		return fail("gosleuth is not in that procfs's PID namespace")
	}
	b, err := os.ReadFile(fs.PID(pid, "status"))
	if err != nil {
		return 0, fmt.Errorf("read status of process %d: %w", pid, ErrProcessGone)
	}
	own, theirs := parseNSpid(self), parseNSpid(b)
	level := len(own) - 1
	if level < 0 || len(theirs) <= level || theirs[0] != pid {
		return fail("")
	}
	local := theirs[level]
	fd, err := unix.PidfdOpen(local, 0)
	if err != nil {
		return fail("pidfd_open: " + err.Error())
	}
	defer unix.Close(fd)
	info, err := os.ReadFile(fs.Path("self", "fdinfo", strconv.Itoa(fd)))
	if err != nil || fdinfoPid(info) != pid {
		// PID local here is another process: the target's PID at
		// that level is in a sibling namespace, not this one.
		return fail("")
	}
	return local, nil
}
