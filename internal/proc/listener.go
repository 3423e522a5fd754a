package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoListener reports that no process visible through the mount listens
// on a TCP port.
var ErrNoListener = errors.New("no local process listens on the port")

// tcpListen is the state column of a listening socket (TCP_LISTEN).
const tcpListen = "0A"

// ListenerPID returns the PID of a process holding a TCP socket that
// listens on port: the sockets in state LISTEN on the port are found in
// the socket tables of the mount's network namespace (ROOT/net/tcp and
// tcp6, by inode), and their holder among the processes' descriptors
// (ROOT/PID/fd/N links to "socket:[INODE]"). The error wraps
// ErrNoListener when no socket listens there, or when its holder is not
// visible (another PID namespace, or no permission to read its fds).
func (fs FS) ListenerPID(port int) (int, error) {
	inodes := map[uint64]bool{}
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fs.Path("net", name))
		if err != nil {
			continue // no IPv6 in this kernel, or no net directory
		}
		ins, err := parseListenInodes(b, port)
		if err != nil {
			return 0, fmt.Errorf("find listener on port %d: %s: %w", port, fs.Path("net", name), err)
		}
		for _, ino := range ins {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("port %d: %w", port, ErrNoListener)
	}
	ents, err := os.ReadDir(fs.Root())
	if err != nil {
		return 0, fmt.Errorf("find listener on port %d: %w", port, err)
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(fs.PID(pid, "fd"))
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, fd := range fds {
			l, err := os.Readlink(fs.PID(pid, "fd", fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := socketInode(l); ok && inodes[ino] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("port %d (socket owner not visible): %w", port, ErrNoListener)
}

// socketInode reads the inode of an fd link "socket:[INODE]".
func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return ino, err == nil
}

// parseListenInodes scans a net/tcp or tcp6 table (see parseTCPSocketOwner
// for its columns) for the sockets in state LISTEN on port, and returns
// their inodes.
func parseListenInodes(b []byte, port int) ([]uint64, error) {
	var out []uint64
	err := socketTable(b, func(f [][]byte, line []byte) (bool, error) {
		if string(f[3]) != tcpListen {
			return false, nil
		}
		l, err := parseSocketAddr(f[1])
		if err != nil || int(l.Port()) != port {
			return false, err
		}
		ino, err := strconv.ParseUint(string(f[9]), 10, 64)
		if err != nil {
			return false, fmt.Errorf("socket line %q: bad inode: %w", line, ErrParse)
		}
		out = append(out, ino)
		return false, nil
	})
	return out, err
}
