//go:build !linux

package perf

import (
	"errors"
	"time"
)

// ErrNotSupportedOnOS reports that perf events exist on Linux only.
var ErrNotSupportedOnOS = errors.New("perf events need Linux")

// Ring is a perf event ring buffer; on this OS every call fails.
type Ring struct{}

// MapRing fails: perf events need Linux.
func MapRing(fd, pages int) (*Ring, error) { return nil, ErrNotSupportedOnOS }

// OpenCPURings fails: perf events need Linux.
func OpenCPURings(attr any, pages int) ([]*Ring, error) { return nil, ErrNotSupportedOnOS }

// FD returns -1.
func (r *Ring) FD() int { return -1 }

// Enable fails.
func (r *Ring) Enable() error { return ErrNotSupportedOnOS }

// Disable fails.
func (r *Ring) Disable() error { return ErrNotSupportedOnOS }

// Lost returns 0.
func (r *Ring) Lost() uint64 { return 0 }

// Records returns 0.
func (r *Ring) Records() uint64 { return 0 }

// Fill returns 0.
func (r *Ring) Fill() float64 { return 0 }

// Wait fails.
func (r *Ring) Wait(time.Duration) (bool, error) { return false, ErrNotSupportedOnOS }

// Read reads nothing.
func (r *Ring) Read(func(uint32, uint16, []byte)) int { return 0 }

// Close does nothing.
func (r *Ring) Close() error { return nil }
