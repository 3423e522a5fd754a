//go:build !linux

package window

import (
	"context"
	"fmt"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

func openatFiles(context.Context, int, time.Duration) (*Files, error) {
	return nil, fmt.Errorf("count opened files: %w", proc.ErrNotSupported)
}
