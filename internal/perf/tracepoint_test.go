//go:build linux

package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"golang.org/x/sys/unix"
)

func TestTracepointIDs(t *testing.T) {
	testenv.Require(t, testenv.Tracefs)
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
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	id, err := TracepointID("syscalls", "sys_enter_getppid")
	if err != nil {
		t.Fatalf("no getppid tracepoint: %v", err)
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

// TestTracefsMountedWhenMissing unmounts tracefs, as a fresh machine boots
// without it, and checks TracefsRoot mounts it again and says so. It works
// in a mount namespace of its own (on a thread that is then discarded), so
// tests of other packages running meanwhile keep their tracefs.
func TestTracefsMountedWhenMissing(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in its own namespace, ends with
		// the goroutine.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare the mount namespace: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make mounts private: %w", err)
			}
			dir, err := TracefsRoot()
			if err != nil {
				return err
			}
			if err := unix.Unmount(dir, 0); err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "events")); err == nil {
				return fmt.Errorf("%s/events still there after unmount", dir)
			}
			if _, err := TracefsRoot(); err != nil {
				return fmt.Errorf("TracefsRoot after unmount: %w", err)
			}
			if !MountedByUs() {
				return errors.New("MountedByUs is false after TracefsRoot mounted tracefs")
			}
			if _, err := TracepointID("raw_syscalls", "sys_enter"); err != nil {
				return fmt.Errorf("raw_syscalls:sys_enter after the mount: %w", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
