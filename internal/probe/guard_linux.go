package probe

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// A gosleuth killed while its tracefs uprobes are attached cannot remove
// their definitions: the kernel drops the perf events with the process,
// but the gosleuth_<PID> group stays in uprobe_events (inert, yet holding
// the target's binary) until a later run's janitor. So the first tracefs
// attach of a process starts a guard: a copy of this executable, started
// with guardEnv set, in its own session, holding the read end of a pipe
// whose write end only this process holds. When this process ends, however
// it ends, the guard reads end-of-file, removes what is left of the group
// (retrying while the kernel still tears the events down) and exits. After
// a normal detach the group is gone already and the guard exits at once.

// guardEnv marks the guard process: "PID ROOT", the process it guards and
// tracefs's root.
const guardEnv = "GOSLEUTH_PROBE_GUARD"

func init() {
	if v := os.Getenv(guardEnv); v != "" {
		os.Exit(guard(v))
	}
}

// guard waits for the end of the guarded process and removes its group.
func guard(v string) int {
	ps, root, ok := strings.Cut(v, " ")
	pid, err := strconv.Atoi(ps)
	if !ok || err != nil || pid <= 0 {
		return 2
	}
	buf := make([]byte, 1)
	for {
		n, err := unix.Read(3, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break
		}
	}
	// The group of the guarded process only, whatever other
	// gosleuth processes run.
	if _, err := removeStale(root, func(p int) bool { return p != pid }); err != nil {
		return 1
	}
	return 0
}

var (
	guardOnce sync.Once
	// guardPipe is the write end of the guard's pipe, kept for the life
	// of the process (a package variable, so no finalizer closes it).
	guardPipe *os.File
)

// startGuard starts this process's guard, once. A guard that cannot start
// leaves the group to the next run's janitor, as before guards.
func startGuard(root string) {
	guardOnce.Do(func() {
		r, w, err := os.Pipe()
		if err != nil {
			return
		}
		defer r.Close()
		cmd, err := proc.StartHelper(proc.SelfExe, []string{guardEnv + "=" + strconv.Itoa(os.Getpid()) + " " + root}, r)
		if err != nil {
			w.Close()
			return
		}
		cmd.Process.Release()
		guardPipe = w
	})
}
