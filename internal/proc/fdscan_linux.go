package proc

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// FDScanner lists one process's open descriptors again and again through a
// kept handle on ROOT/PID/fd, and reads the target of each descriptor that
// was not in the previous listing. A file a process opens and closes many
// times a second is open for microseconds each time, so a listing now and
// then catches it open: over many listings the paths caught, by count, say
// which files are re-opened, whether the program names them by a constant
// or builds them per call, and without any cost to the target beyond the
// kernel's lock on its descriptor table. Descriptors that stay open are
// seen in consecutive listings and never reported.
//
// Written by hand rather than with os.ReadDir and os.Readlink: a listing
// every few milliseconds must not allocate per entry or re-open the
// directory.
type FDScanner struct {
	dirfd int
	buf   []byte
	link  []byte
	prev  map[int]bool
	cur   map[int]bool
	fds   []int
	first bool
}

// NewFDScanner opens the descriptor directory of pid. The first Scan only
// records what is open.
func (fs FS) NewFDScanner(pid int) (*FDScanner, error) {
	path := fs.PID(pid, "fd")
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, scanErr(err))
	}
	return &FDScanner{dirfd: fd, buf: make([]byte, 8192), link: make([]byte, 4096),
		prev: map[int]bool{}, cur: map[int]bool{}, first: true}, nil
}

// Scan lists the descriptors and calls fn with each one absent from the
// previous listing and the target it points to ("/etc/hosts",
// "socket:[1234]", "pipe:[5]", "anon_inode:[eventfd]"). A descriptor
// closed between the listing and the read is skipped. Once the process
// has exited the error wraps ErrProcessGone.
func (s *FDScanner) Scan(fn func(fd int, target string)) error {
	if _, err := unix.Seek(s.dirfd, 0, 0); err != nil {
		return fmt.Errorf("rewind descriptor list: %w", scanErr(err))
	}
	s.fds = s.fds[:0]
	for {
		n, err := unix.Getdents(s.dirfd, s.buf)
		if err != nil {
			return fmt.Errorf("list descriptors: %w", scanErr(err))
		}
		if n <= 0 {
			break
		}
		forEachNumericDirent(s.buf[:n], func(v uint64) { s.fds = append(s.fds, int(v)) })
	}
	clear(s.cur)
	for _, fd := range s.fds {
		s.cur[fd] = true
		if s.first || s.prev[fd] {
			continue
		}
		n, err := unix.Readlinkat(s.dirfd, strconv.Itoa(fd), s.link)
		if err != nil || n <= 0 {
			continue // closed since the listing
		}
		fn(fd, string(s.link[:n]))
	}
	s.first = false
	s.prev, s.cur = s.cur, s.prev
	return nil
}

// Close releases the directory handle.
func (s *FDScanner) Close() error {
	if s.dirfd < 0 {
		return nil
	}
	err := unix.Close(s.dirfd)
	s.dirfd = -1
	if err != nil && !errors.Is(err, unix.EBADF) {
		return fmt.Errorf("close descriptor list: %w", err)
	}
	return nil
}

// scanErr names the shared conditions: the process gone, access denied.
func scanErr(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH):
		return ErrProcessGone
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: reading another user's descriptors needs root", ErrPermission)
	}
	return err
}
