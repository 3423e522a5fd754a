//go:build !linux

package goruntime

import (
	"errors"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// liveGOMAXPROCS reads another process's memory through /proc/PID/mem,
// which only Linux has.
func liveGOMAXPROCS(proc.FS, int, string) (int, string, error) {
	return 0, "", errors.ErrUnsupported
}
