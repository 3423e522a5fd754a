package proc

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// TaskLister lists the threads of one process again and again, as
// FS.TaskIDs does, through descriptors it keeps open on the process's task
// directory and stat file, with raw system calls (see sys_linux.go). A
// sampler looks for new threads ten times a second; through TaskIDs each
// look made some eight ordinary system calls (the directory's open, stat,
// listing and close, and the stat file read that tells an exited leader),
// and each woke the Go runtime's sysmon thread: on an idle target the
// looks and sysmon were 60% of gosleuth profile's CPU.
//
// The descriptors refer to the process, not its PID: once the process is
// reaped they answer ErrProcessGone, whatever process takes the PID. A
// TaskLister is not safe for concurrent use.
type TaskLister struct {
	fs     FS
	pid    int
	taskfd int
	// pidfd refers to the process (pidfd_open, Linux 5.3): it polls
	// readable once the process has exited, which tells an exited leader
	// left alone in the listing without reading its stat. -1 where it
	// could not be opened; statfd is then opened at the first listing
	// that shows the leader alone.
	pidfd  int
	statfd int
	buf    []byte
}

// NewTaskLister opens the task directory of process pid. A process that is
// gone gives an error wrapping ErrProcessGone.
func (fs FS) NewTaskLister(pid int) (*TaskLister, error) {
	fd, err := unix.Open(fs.PID(pid, "task"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// TaskIDs tells a process that is gone from one not readable.
		if _, lerr := fs.TaskIDs(pid); lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("list threads of process %d: %w", pid, err)
	}
	l := &TaskLister{fs: fs, pid: pid, taskfd: fd, pidfd: -1, statfd: -1, buf: make([]byte, 4096)}
	if fs.ownNamespace() {
		// Opened after the directory, so it refers to the process listed
		// or, were the PID reused in between, the listing fails first.
		if pfd, err := unix.PidfdOpen(pid, 0); err == nil {
			l.pidfd = pfd
		}
	}
	return l, nil
}

// List appends the process's thread IDs to dst[:0], in the directory's
// order, and returns it. A process that is gone, has no threads left, or
// is an exited leader not yet reaped gives an error wrapping
// ErrProcessGone, as TaskIDs does.
func (l *TaskLister) List(dst []int) ([]int, error) {
	dst = dst[:0]
	if l.taskfd < 0 {
		return dst, fmt.Errorf("list threads of process %d: lister closed", l.pid)
	}
	if _, err := rawSeek(l.taskfd, 0, 0); err != nil {
		return dst, l.err(err)
	}
	for {
		n, err := rawGetdents(l.taskfd, l.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return dst, l.err(err)
		}
		if n <= 0 {
			break
		}
		// Only a call that returns nothing ends the listing: one that
		// left room in the buffer need not have reached the end (the
		// task directory of a process creating threads was seen to
		// answer "." and ".." alone, then its threads at the next call).
		forEachNumericDirent(l.buf[:n], func(id uint64) { dst = append(dst, int(id)) })
	}
	if len(dst) == 0 {
		return dst, fmt.Errorf("list threads of process %d: %w", l.pid, ErrProcessGone)
	}
	if len(dst) == 1 && dst[0] == l.pid {
		if err := l.checkLeader(); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// checkLeader tells whether a leader left alone has exited (a zombie),
// which means the process is gone: from its pidfd, else from its stat
// file.
func (l *TaskLister) checkLeader() error {
	exited, err := l.leaderExited()
	if err != nil {
		return l.err(err)
	}
	if exited {
		return fmt.Errorf("list threads of process %d: %w (%w)", l.pid, ErrProcessGone, ErrZombie)
	}
	return nil
}

// leaderExited asks the pidfd, or where there is none the stat file,
// whether the leader has exited.
func (l *TaskLister) leaderExited() (bool, error) {
	if l.pidfd >= 0 {
		return rawExited(l.pidfd)
	}
	if l.statfd < 0 {
		fd, err := unix.Open(l.fs.PID(l.pid, "stat"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		l.statfd = fd
	}
	n, err := rawPread(l.statfd, l.buf, 0)
	if err != nil {
		return false, err
	}
	return statExited(l.buf[:max(n, 0)]), nil
}

// err names an error of a listing; the errors a reaped process's
// descriptors give (ENOENT, ESRCH) wrap ErrProcessGone.
func (l *TaskLister) err(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("list threads of process %d: %w (%w)", l.pid, ErrProcessGone, err)
	}
	return fmt.Errorf("list threads of process %d: %w", l.pid, err)
}

// Close closes the lister's descriptors.
func (l *TaskLister) Close() error {
	var errs []error
	for _, fd := range []*int{&l.taskfd, &l.pidfd, &l.statfd} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("close thread lister of process %d: %w", l.pid, err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
