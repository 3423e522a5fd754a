//go:build !linux

package syscalls

import (
	"context"
	"io"
)

// Run needs Linux: elsewhere it returns ErrNotSupported.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	return ErrNotSupported
}
