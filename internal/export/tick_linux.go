package export

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tickTimer is a one-shot timer on a timerfd that Go's netpoller waits on,
// not a runtime timer. The runtime's sysmon thread sleeps until the next
// runtime timer, so the exporter's 1 s timer woke it at every sample, and
// it then polled every 20 us while the sample ran: 3.3 of the exporter's
// 4.5 thread wake-ups a second, scraped every 15 s. To the runtime a
// timerfd is a file, so sysmon keeps its long sleep.
type tickTimer struct {
	f  *os.File
	fd int
	c  chan struct{}
}

func newTickTimer() (*tickTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create timerfd: %w", err)
	}
	t := &tickTimer{f: os.NewFile(uintptr(fd), "exporter-timerfd"), fd: fd, c: make(chan struct{}, 1)}
	go t.wait()
	return t, nil
}

// wait passes each expiry to c until the file is closed. The poller waits
// for the timerfd; the read itself is a raw system call, because entering
// the runtime's system-call path wakes a sleeping sysmon too.
func (t *tickTimer) wait() {
	rc, err := t.f.SyscallConn()
	if err != nil {
		return
	}
	var buf [8]byte
	read := func(fd uintptr) bool {
		_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		return e != unix.EAGAIN
	}
	for {
		if err := rc.Read(read); err != nil {
			return
		}
		select {
		case t.c <- struct{}{}:
		default:
		}
	}
}

// C receives a value when the timer fires.
func (t *tickTimer) C() <-chan struct{} { return t.c }

// reset arms the timer to fire once after d, replacing any earlier setting.
func (t *tickTimer) reset(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(d, time.Nanosecond)))}
	// Raw, as the read is: timerfd_settime does not block.
	_, _, e := unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(t.fd), 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("arm timerfd: %w", e)
	}
	return nil
}

// stop releases the timer.
func (t *tickTimer) stop() { t.f.Close() }
