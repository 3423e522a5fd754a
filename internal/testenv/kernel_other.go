//go:build !linux

package testenv

func probeKernel(f Feature) string { return "needs Linux" }
