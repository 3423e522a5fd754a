// Package fastclock is a "fast clock" as libraries write it: a package
// variable refreshed by a 1 ms ticker, started on first use. Importing it
// is enough to wake the process a thousand times a second.
package fastclock

import (
	"sync"
	"sync/atomic"
	"time"
)

var (
	now  atomic.Int64
	once sync.Once
)

// Now returns the cached time in Unix nanoseconds.
func Now() int64 {
	once.Do(start)
	return now.Load()
}

func start() {
	now.Store(time.Now().UnixNano())
	t := time.NewTicker(time.Millisecond)
	go refresh(t)
}

func refresh(t *time.Ticker) {
	for tick := range t.C {
		now.Store(tick.UnixNano())
	}
}

// Rearm keeps a timer re-armed from its own callback every period, the
// other way a library keeps a clock (no goroutine of its own).
func Rearm(period time.Duration) {
	var f func()
	f = func() {
		now.Store(time.Now().UnixNano())
		time.AfterFunc(period, f)
	}
	time.AfterFunc(period, f)
}
