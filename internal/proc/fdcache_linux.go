//go:build linux

package proc

import (
	"errors"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rebalance closes descriptors of the warm class (read only when a task ran)
// beyond their share, so the hot ones (schedstat, read every refresh) keep
// room under the cap as the task count grows.
func (r *Reader) rebalance() {
	budget := r.warmBudget()
	for _, s := range r.order {
		if r.warmKept <= budget {
			return
		}
		for _, ts := range s.tasks {
			r.closeFD(&ts.statfd, false)
			r.closeFD(&ts.statusfd, false)
		}
		r.closeFD(&s.iofd, false)
		r.closeFD(&s.fdfd, false)
		r.closeFD(&s.limfd, false)
		if !r.procHot {
			r.closeFD(&s.statfd, false)
			r.closeFD(&s.taskfd, false)
		}
	}
}

// warmBudget is what the cap leaves for warm descriptors once every task's
// schedstat and every process's stat and task directory (the hot ones) fit;
// with IdleStatEvery, the schedstat ones alone.
func (r *Reader) warmBudget() int {
	if !r.procHot {
		return r.max - r.nTasks
	}
	return r.max - r.nTasks - 2*len(r.order)
}

func (r *Reader) closeSlot(s *procSlot) {
	for _, ts := range s.tasks {
		r.closeTask(ts)
	}
	s.tasks = nil
	r.closeFD(&s.statfd, r.procHot)
	r.closeFD(&s.taskfd, r.procHot)
	r.closeFD(&s.fdfd, false)
	r.closeFD(&s.iofd, false)
	r.closeFD(&s.limfd, false)
}

// closeTask releases a thread's descriptors and its place in the budget. It
// is called once per thread: the thread leaves its process's list with it.
func (r *Reader) closeTask(ts *taskSlot) {
	r.nTasks--
	r.closeFD(&ts.schedfd, true)
	r.closeFD(&ts.statfd, false)
	r.closeFD(&ts.statusfd, false)
	ts.fresh = false
	ts.gone = true
}

func (r *Reader) closeFD(fdp *int, hot bool) {
	if *fdp < 0 {
		return
	}
	rawClose(*fdp)
	*fdp = -1
	r.kept--
	if !hot {
		r.warmKept--
	}
}

// read returns the content of a task file (pid's when tid is 0) in r.buf,
// through *fdp when it is kept. Otherwise it opens the file, and keeps it in
// *fdp when fdp is not nil and the budget allows.
func (r *Reader) read(fdp *int, hot bool, pid, tid int32, name string) ([]byte, error) {
	fd, transient, err := r.ensure(fdp, hot, pid, tid, name, 0)
	if err != nil {
		return nil, err
	}
	r.stats.Reads++
	n, err := rawPread(fd, r.buf, 0)
	if transient {
		rawClose(fd)
	}
	if err != nil {
		return nil, classify(err)
	}
	return r.buf[:n], nil
}

// readCmdline reads pid's command line into r.buf through an ordinary
// pread (see sys_linux.go): the kernel copies it from the process's memory
// under its mmap_lock.
func (r *Reader) readCmdline(pid int32) ([]byte, error) {
	fd, _, err := r.ensure(nil, false, pid, 0, "cmdline", 0)
	if err != nil {
		return nil, err
	}
	r.stats.Reads++
	n, err := unix.Pread(fd, r.buf, 0)
	rawClose(fd)
	if err != nil {
		return nil, classify(err)
	}
	return r.buf[:n], nil
}

// ensure returns a descriptor for the file; transient means the caller must
// close it after use.
func (r *Reader) ensure(fdp *int, hot bool, pid, tid int32, name string, flags int) (fd int, transient bool, err error) {
	if fdp != nil && *fdp >= 0 {
		return *fdp, false, nil
	}
	r.setPath(pid, tid, name)
	r.stats.Opens++
	fd, err = openBytes(r.path, unix.O_RDONLY|flags)
	if err != nil {
		return -1, false, classify(err)
	}
	if fdp == nil || r.kept >= r.max || (!hot && r.warmKept >= r.warmBudget()) {
		return fd, true, nil
	}
	*fdp = fd
	r.kept++
	if !hot {
		r.warmKept++
	}
	return fd, false, nil
}

// setPath puts ROOT/PID[/task/TID]/NAME, NUL-terminated, in r.path.
func (r *Reader) setPath(pid, tid int32, name string) {
	r.path = append(r.path[:0], r.root...)
	r.path = append(r.path, '/')
	r.path = strconv.AppendInt(r.path, int64(pid), 10)
	if tid != 0 {
		r.path = append(r.path, "/task/"...)
		r.path = strconv.AppendInt(r.path, int64(tid), 10)
	}
	r.path = append(r.path, '/')
	r.path = append(r.path, name...)
	r.path = append(r.path, 0)
}

// openBytes is openat(AT_FDCWD) on a NUL-terminated path held in a reused
// buffer: unix.Open takes a string and would allocate a copy on every call.
func openBytes(path []byte, flags int) (int, error) {
	dirfd := unix.AT_FDCWD
	fd, _, errno := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd),
		uintptr(unsafe.Pointer(&path[0])), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

func classify(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		return errGone
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return errDenied
	}
	return err
}
