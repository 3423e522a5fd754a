//go:build unix

package top

import (
	"runtime"
	"syscall"
	"time"
)

type selfUsage struct {
	user, sys time.Duration
	rss       uint64
}

// readSelfUsage returns gosleuth's own CPU time and peak RSS.
func readSelfUsage() selfUsage {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return selfUsage{}
	}
	rss := uint64(ru.Maxrss)
	if runtime.GOOS == "linux" {
		rss *= 1024 // kilobytes on Linux
	}
	return selfUsage{
		user: time.Duration(ru.Utime.Nano()),
		sys:  time.Duration(ru.Stime.Nano()),
		rss:  rss,
	}
}
