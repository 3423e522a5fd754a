//go:build !linux

package doctor

import "runtime"

func allowedCPUs(int) int { return 0 }

func onlineCPUs() int { return runtime.NumCPU() }
