package doctor

import (
	"runtime"

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

func onlineCPUs() int { return runtime.NumCPU() }
