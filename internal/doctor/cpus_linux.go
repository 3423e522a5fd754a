package doctor

import (
	"runtime"

	"github.com/gosleuth/gosleuth/internal/proc"
	"golang.org/x/sys/unix"
)

// allowedCPUs is the size of pid's CPU affinity mask, 0 when unreadable.
func allowedCPUs(pid int) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return 0
	}
	return set.Count()
}

// onlineCPUs is the host's online CPU count (not gosleuth's own affinity,
// which runtime.NumCPU gives), falling back to runtime.NumCPU.
func onlineCPUs() int {
	if c, err := proc.OnlineCPUs(); err == nil {
		return len(c)
	}
	return runtime.NumCPU()
}
