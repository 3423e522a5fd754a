//go:build linux

package perf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

// ErrPermission reports that the kernel refused a perf event or tracefs
// access for lack of privilege. Errors wrapping it carry a hint on how to get
// the access (root, CAP_PERFMON, perf_event_paranoid).
var ErrPermission = errors.New("permission denied")

// ErrNoTracefs reports that no tracefs mount was found (nor could be made).
var ErrNoTracefs = tracefs.ErrNotMounted

// TracefsRoot returns the directory where tracefs is mounted, mounting it
// first as root when none is (see tracefs.Root).
func TracefsRoot() (string, error) {
	dir, err := tracefs.Root()
	if errors.Is(err, tracefs.ErrPermission) {
		return "", fmt.Errorf("%w: %w", ErrPermission, err)
	}
	return dir, err
}

// MountedByUs reports whether this process mounted tracefs because none was
// mounted (reports say so in their notes).
func MountedByUs() bool { return tracefs.MountedByUs() }

// TracepointID returns the perf config value of tracepoint group:name (for
// example "raw_syscalls", "sys_enter") from tracefs events/GROUP/NAME/id.
func TracepointID(group, name string) (uint64, error) {
	root, err := TracefsRoot()
	if err != nil {
		return 0, err
	}
	return tracepointIDAt(root, group, name)
}

func tracepointIDAt(root, group, name string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(root, "events", group, name, "id"))
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return 0, fmt.Errorf("read id of tracepoint %s:%s: %w", group, name, ErrPermission)
		}
		return 0, fmt.Errorf("read id of tracepoint %s:%s: %w", group, name, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse id of tracepoint %s:%s: %w", group, name, err)
	}
	return id, nil
}

// Tracepoints lists the tracepoint names in tracefs group whose names start
// with prefix (for example "syscalls", "sys_enter_"), sorted.
func Tracepoints(group, prefix string) ([]string, error) {
	root, err := TracefsRoot()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(root, "events", group))
	if err != nil {
		return nil, fmt.Errorf("list tracepoints of %s: %w", group, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Paranoid returns /proc/sys/kernel/perf_event_paranoid (2 on most
// distributions: unprivileged users may only profile their own processes in
// user mode).
func Paranoid() (int, error) {
	v, err := proc.NewFS("").Sysctl("kernel/perf_event_paranoid")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("parse perf_event_paranoid: %w", err)
	}
	return n, nil
}

// OpenTask opens a perf event described by attr on one thread (any CPU),
// close-on-exec, in group groupFD (-1 for none). Errors name the thread and
// wrap ErrPermission, unix.ESRCH (the thread has gone) or unix.EMFILE (out of
// file descriptors: see RaiseFDLimit) so callers can decide what to do.
func OpenTask(attr *unix.PerfEventAttr, tid, groupFD int) (int, error) {
	if attr.Size == 0 {
		attr.Size = uint32(unsafe.Sizeof(*attr))
	}
	fd, err := unix.PerfEventOpen(attr, tid, -1, groupFD, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		p, perr := Paranoid()
		hint := "run as root or grant CAP_PERFMON"
		if perr == nil {
			hint = fmt.Sprintf("%s (perf_event_paranoid is %d)", hint, p)
		}
		return -1, fmt.Errorf("open perf event on thread %d: %w: %s: %w", tid, ErrPermission, hint, err)
	}
	return -1, fmt.Errorf("open perf event on thread %d: %w", tid, err)
}

// RaiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit and returns
// the new soft limit. Per-task counters need one descriptor per thread and
// event, far beyond the usual soft limit of 1024.
func RaiseFDLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}
