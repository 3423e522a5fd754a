//go:build linux

package perf

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTracepointIDs(t *testing.T) {
	if _, err := TracefsRoot(); err != nil {
		t.Skipf("no tracefs here: %v", err)
	}
	id, err := TracepointID("raw_syscalls", "sys_enter")
	if err != nil {
		t.Fatal(err)
	}
	if id == 0 {
		t.Fatal("raw_syscalls:sys_enter has id 0")
	}
	names, err := Tracepoints("syscalls", "sys_enter_")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 100 {
		t.Fatalf("only %d sys_enter_* tracepoints", len(names))
	}
	if _, err := TracepointID("syscalls", "no_such_event"); err == nil {
		t.Fatal("no error for a missing tracepoint")
	}
}

// TestOpenTaskCounts counts this thread's getppid calls with a per-task
// tracepoint counter: the count must be exact.
func TestOpenTaskCounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("per-task tracepoint counters need root (tracefs ids and perf_event_paranoid)")
	}
	id, err := TracepointID("syscalls", "sys_enter_getppid")
	if err != nil {
		t.Skipf("no getppid tracepoint: %v", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	attr := &unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Bits: unix.PerfBitDisabled}
	fd, err := OpenTask(attr, unix.Gettid(), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		t.Fatal(err)
	}
	const n = 12345
	for range n {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		t.Fatal(err)
	}
	var buf [8]byte
	if _, err := unix.Read(fd, buf[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.NativeEndian.Uint64(buf[:]); got != n {
		t.Fatalf("counted %d getppid calls, want %d", got, n)
	}
}

func TestOpenTaskGoneThread(t *testing.T) {
	attr := &unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_TASK_CLOCK, Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel}
	_, err := OpenTask(attr, 1<<30, -1)
	if !errors.Is(err, unix.ESRCH) {
		t.Fatalf("open on a missing thread: %v, want ESRCH", err)
	}
}

func TestRaiseFDLimit(t *testing.T) {
	n, err := RaiseFDLimit()
	if err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != lim.Max || n != lim.Cur {
		t.Fatalf("soft limit %d, hard %d, returned %d", lim.Cur, lim.Max, n)
	}
}
