//go:build !linux

package proc

// affinity is Linux's.
func (fs FS) affinity(int) ([]int, bool) { return nil, false }
