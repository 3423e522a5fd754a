package proc

import (
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A refresh reads /proc through raw system calls, which do not go through
// the Go scheduler's system-call path. Each entry into that path while the
// runtime's sysmon thread sleeps idle (the reader waking once a second on
// an otherwise idle program) wakes sysmon, which then polls every 20 us
// for a millisecond and more: about 50 wake-ups a refresh, 14% of the
// exporter's CPU in a profile. Side by side on one host the raw calls cut
// the exporter's wake-ups from 59 to 14 a second and its CPU by a sixth
// (bench/exporter-cost). The price is that a call holds its P while in the
// kernel, so only calls that cannot block for long are raw: reads of stat,
// schedstat, status, io, limits and cgroup files, directory listings,
// opens and closes of /proc files, and the taskstats socket, whose
// replies are queued before the request's write returns, the statx of
// a new process's executable and the read of its build information (its
// pages are in the page cache, the process having just started), and that
// of a descriptor (fstatx). Its
// command line is read through ordinary calls (readCmdline): the kernel
// copies it from the target's memory under its mmap_lock, which a process
// changing its mappings can hold for long (the reason ps hangs on a
// process stuck in a page fault).

func rawErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func rawPread(fd int, p []byte, off int64) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(ptr), uintptr(len(p)), uintptr(off), 0, 0)
	return int(n), rawErr(e)
}

// rawWrite is write(2).
func rawWrite(fd int, p []byte) (int, error) { return rawBuf(unix.SYS_WRITE, fd, p) }

// rawGetdents is getdents64(2).
func rawGetdents(fd int, buf []byte) (int, error) { return rawBuf(unix.SYS_GETDENTS64, fd, buf) }

// rawBuf makes system call nr on fd with a buffer.
func rawBuf(nr uintptr, fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := unix.RawSyscall(nr, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	return int(n), rawErr(e)
}

// rawExited reports whether the process pidfd refers to has exited (its
// pidfd polls readable: a zombie, or reaped), with a ppoll that does not
// wait.
func rawExited(pidfd int) (bool, error) {
	fds := [1]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	var ts unix.Timespec
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch e {
		case unix.EINTR:
			// ppoll is not restarted after a signal handler ran (the
			// Go runtime's preemption signal, for one), even without
			// a wait.
			continue
		case 0:
			return n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, nil
		}
		return false, e
	}
}

func rawClose(fd int) error {
	_, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	return rawErr(e)
}

func rawSeek(fd int, off int64, whence int) (int64, error) {
	n, _, e := unix.RawSyscall(unix.SYS_LSEEK, uintptr(fd), uintptr(off), uintptr(whence))
	return int64(n), rawErr(e)
}

// rawStatx is statx(2) of a NUL-terminated path for its device and inode.
func rawStatx(path []byte, st *unix.Statx_t) error {
	dirfd := unix.AT_FDCWD
	_, _, e := unix.RawSyscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])), 0,
		unix.STATX_INO, uintptr(unsafe.Pointer(st)), 0)
	return rawErr(e)
}

// emptyPath is the "" that statx takes with AT_EMPTY_PATH.
var emptyPath = [1]byte{}

// rawFstatx is statx(2) of an open descriptor, for the fields in mask.
func rawFstatx(fd int, mask int, st *unix.Statx_t) error {
	_, _, e := unix.RawSyscall6(unix.SYS_STATX, uintptr(fd), uintptr(unsafe.Pointer(&emptyPath[0])), unix.AT_EMPTY_PATH,
		uintptr(mask), uintptr(unsafe.Pointer(st)), 0)
	return rawErr(e)
}

// rawReaderAt is an io.ReaderAt over a descriptor, read with raw pread(2).
type rawReaderAt int

func (f rawReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := rawPread(int(f), p[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}
