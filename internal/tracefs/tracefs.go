//go:build linux

// Package tracefs finds the kernel's tracing filesystem, and mounts it where
// a fresh machine has none: perf does the same on first use, and without it
// the syscall tracepoints, sched_switch and uprobe_events are out of reach.
package tracefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var (
	// ErrNotMounted reports that no tracefs mount was found, nor could be made.
	ErrNotMounted = errors.New("tracefs not mounted")
	// ErrPermission reports a tracefs this user may not read.
	ErrPermission = errors.New("tracefs not readable")
)

// candidates are where tracefs is mounted on current and older systems; the
// first is where Root mounts it.
var candidates = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

var (
	mu      sync.Mutex
	mounted bool
)

// Root returns the directory where tracefs is mounted. When none is mounted
// and the caller may mount (CAP_SYS_ADMIN), it mounts tracefs at
// /sys/kernel/tracing first and leaves it mounted, as perf does.
func Root() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	dir, err := find()
	if err == nil || !errors.Is(err, ErrNotMounted) {
		return dir, err
	}
	if merr := mount(candidates[0]); merr != nil {
		return "", fmt.Errorf("%w (mounting it at %s failed: %w)", err, candidates[0], merr)
	}
	mounted = true
	return find()
}

// MountedByUs reports whether this process mounted tracefs.
func MountedByUs() bool {
	mu.Lock()
	defer mu.Unlock()
	return mounted
}

func mount(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("stat mount point: %w", err)
	}
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil // mounted meanwhile by someone else
		}
		return fmt.Errorf("mount tracefs: %w", err)
	}
	return nil
}

func find() (string, error) {
	var firstErr error
	for _, dir := range candidates {
		_, err := os.Stat(filepath.Join(dir, "events"))
		if err == nil {
			return dir, nil
		}
		if errors.Is(err, os.ErrPermission) && firstErr == nil {
			firstErr = fmt.Errorf("read tracefs at %s: %w (readable by root only unless mounted with gid=/mode=)", dir, ErrPermission)
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("find tracefs in %s: %w", strings.Join(candidates, ", "), ErrNotMounted)
}
