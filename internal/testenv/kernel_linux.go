package testenv

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/tracefs"
)

func probeKernel(f Feature) string {
	switch f {
	case Perf:
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_TASK_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits:   unix.PerfBitDisabled,
		}
		// pid 1 is another user's process: what a profiler of other
		// processes needs.
		fd, err := unix.PerfEventOpen(&attr, 1, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return "perf_event_open on another process: " + err.Error()
		}
		unix.Close(fd)
		return ""
	case Tracefs:
		if _, err := tracefs.Root(); err != nil {
			return err.Error()
		}
		return ""
	case Uprobes:
		if _, err := os.Stat("/sys/bus/event_source/devices/uprobe/type"); err != nil {
			return "no uprobe PMU: " + err.Error()
		}
		return ""
	case BPF:
		// An array map of one int: the cheapest object bpf(2) creates.
		attr := struct {
			mapType, keySize, valueSize, maxEntries uint32
		}{mapType: 2, keySize: 4, valueSize: 4, maxEntries: 1}
		fd, _, errno := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if errno != 0 {
			return "bpf(BPF_MAP_CREATE): " + errno.Error()
		}
		unix.Close(int(fd))
		return ""
	}
	return "unknown feature " + string(f)
}
