//go:build !linux

package tracefs

import "errors"

var (
	// ErrNotMounted reports that no tracefs mount was found, nor could be made.
	ErrNotMounted = errors.New("tracefs not mounted")
	// ErrPermission reports a tracefs this user may not read.
	ErrPermission = errors.New("tracefs not readable")
)

// Root reports ErrNotMounted: tracefs is Linux's.
func Root() (string, error) { return "", ErrNotMounted }

// MountedByUs is false outside Linux.
func MountedByUs() bool { return false }
