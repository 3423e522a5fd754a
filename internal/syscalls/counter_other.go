//go:build !linux

package syscalls

import "errors"

// ErrNotSupported reports that syscall counting needs Linux.
var ErrNotSupported = errors.New("syscall counting needs Linux")
