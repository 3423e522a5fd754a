//go:build !linux

package window

func syscallGettid() int { return 0 }
