//go:build !linux

package proc

import "fmt"

// FDScanner lists a process's descriptors; it exists only on Linux.
type FDScanner struct{}

// NewFDScanner returns ErrNotSupported outside Linux.
func (fs FS) NewFDScanner(pid int) (*FDScanner, error) {
	return nil, fmt.Errorf("list descriptors: %w: needs Linux", ErrNotSupported)
}

// Scan returns ErrNotSupported outside Linux.
func (*FDScanner) Scan(func(fd int, target string)) error {
	return fmt.Errorf("list descriptors: %w: needs Linux", ErrNotSupported)
}

// Close does nothing outside Linux.
func (*FDScanner) Close() error { return nil }
