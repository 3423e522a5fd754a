//go:build !linux

package probe

import (
	"context"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Run needs Linux: elsewhere it returns ErrNotSupported.
func Run(ctx context.Context, fs proc.FS, pid int, probes []Probe, o Options) (*Result, error) {
	return nil, ErrNotSupported
}
