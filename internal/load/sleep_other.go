//go:build !linux

package load

import "time"

// sleeper falls back to time.Sleep where there is no timerfd; expect up to a
// millisecond of pacer lag when the process is otherwise idle.
type sleeper struct{}

func newSleeper() (*sleeper, error) { return &sleeper{}, nil }

func (*sleeper) sleep(d time.Duration) error { time.Sleep(d); return nil }

func (*sleeper) close() {}

// selfCPU is unknown here.
func selfCPU() time.Duration { return 0 }
