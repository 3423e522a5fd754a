//go:build !linux

package proc

import "fmt"

// Reader reads processes; it exists only on Linux.
type Reader struct{}

// NewReader returns ErrNotSupported outside Linux.
func NewReader(Options) (*Reader, error) {
	return nil, fmt.Errorf("read /proc: %w: needs Linux", ErrNotSupported)
}

// Snapshot returns ErrNotSupported outside Linux.
func (*Reader) Snapshot(*Snapshot) error {
	return fmt.Errorf("read /proc: %w: needs Linux", ErrNotSupported)
}

// Close does nothing outside Linux.
func (*Reader) Close() error { return nil }
