//go:build !linux

package stacks

// bpfKernelNames fails: BPF is Linux's.
func bpfKernelNames([]uint64) ([]string, error) { return nil, ErrNotSupported }
