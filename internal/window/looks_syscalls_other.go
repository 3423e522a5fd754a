//go:build !linux

package window

import (
	"context"
	"errors"
	"time"
)

// Look implements Look: syscall counters need Linux.
func (SyscallsLook) Look(context.Context, int, time.Duration, *Window) error {
	return errors.New("counting syscalls needs Linux")
}
