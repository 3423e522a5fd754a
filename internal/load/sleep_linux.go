package load

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper waits with microsecond precision without holding an OS thread: a
// timerfd registered with Go's netpoller. time.Sleep is not enough for the
// pacer: when the process is otherwise idle the runtime blocks in
// epoll_wait, whose timeout has millisecond resolution, so sub-millisecond
// waits overshoot by up to a millisecond, the very lag the self-check
// rejects. A timerfd wakes epoll_wait when it fires.
type sleeper struct {
	f   *os.File
	fd  int
	buf [8]byte
}

func newSleeper() (*sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create timerfd: %w", err)
	}
	return &sleeper{f: os.NewFile(uintptr(fd), "pacer-timerfd"), fd: fd}, nil
}

// sleep waits for d (d > 0).
func (s *sleeper) sleep(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		return fmt.Errorf("arm timerfd: %w", err)
	}
	if _, err := s.f.Read(s.buf[:]); err != nil {
		return fmt.Errorf("read timerfd: %w", err)
	}
	return nil
}

func (s *sleeper) close() { s.f.Close() }

// selfCPU returns the CPU time (user + system) this process has used.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
