//go:build !linux

package compare

import (
	"context"
	"errors"
)

// Run compares the sides of cfg. It reads /proc and the kernel's counters
// and runs on Linux only.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errors.New("compare reads /proc and runs on Linux only")
}
