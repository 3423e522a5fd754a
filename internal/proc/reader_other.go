//go:build !linux

package proc

import "errors"

// ErrNotSupported is returned by NewReader on systems other than Linux.
var ErrNotSupported = errors.New("reading processes needs Linux /proc")

// Reader reads processes; it exists only on Linux.
type Reader struct{}

// NewReader returns ErrNotSupported outside Linux.
func NewReader(Options) (*Reader, error) { return nil, ErrNotSupported }

// Snapshot returns ErrNotSupported outside Linux.
func (*Reader) Snapshot(*Snapshot) error { return ErrNotSupported }

// Close does nothing outside Linux.
func (*Reader) Close() error { return nil }
