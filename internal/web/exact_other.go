//go:build !linux

package web

import (
	"fmt"

	"github.com/gosleuth/gosleuth/internal/proc"
)

func newExactCounter(int) (exactCounter, string, error) {
	return nil, "", fmt.Errorf("exact syscall counts: %w: needs Linux", proc.ErrNotSupported)
}
