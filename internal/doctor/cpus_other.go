//go:build !linux

package doctor

import "runtime"

func allowedCPUs(int) int { return 0 }

// onlineCPUs is the host's online CPU count (not gosleuth's own affinity,
// which runtime.NumCPU gives), falling back to runtime.NumCPU.
func onlineCPUs() int { return runtime.NumCPU() }
