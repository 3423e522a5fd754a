package proc

import (
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// ownRoots caches, per /proc root, whether it is a procfs of this
// process's PID namespace, where a PID read from it is one the kernel's
// calls take.
var ownRoots sync.Map // root -> bool

// ownNamespace reports whether fs's PIDs are this process's (its "self"
// names this process).
func (fs FS) ownNamespace() bool {
	root := fs.Root()
	if v, ok := ownRoots.Load(root); ok {
		return v.(bool)
	}
	self, err := os.Readlink(root + "/self")
	own := err == nil && self == strconv.Itoa(os.Getpid())
	ownRoots.Store(root, own)
	return own
}

// affinity returns the CPUs process pid may run on from sched_getaffinity
// (a raw call: the kernel renders nothing), false where fs's PIDs are not
// this process's or the call fails. The whole-host windows of the doctor
// ask it of every process they saw; reading each one's status text for
// its Cpus_allowed_list cost some 10 ms a window under 5,000 new
// processes a second.
func (fs FS) affinity(pid int) ([]int, bool) {
	if !fs.ownNamespace() {
		return nil, false
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, false
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, true
}
