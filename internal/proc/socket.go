package proc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
)

// SocketOwner is what the kernel's TCP socket table says about one socket.
type SocketOwner struct {
	// UID is the user that created the socket, in the reader's user
	// namespace.
	UID int
	// Inode is the socket's inode; 0 when no process holds the socket any
	// more (closed, in FIN_WAIT or TIME_WAIT), where the table's UID is
	// not the creator's but 0.
	Inode uint64
}

// TCPSocketOwner finds the TCP socket whose local address is local and
// whose peer is remote in the socket table of the reader's network
// namespace (ROOT/self/net/tcp, then tcp6, where an IPv4 peer of a
// dual-stack socket shows as ::ffff:a.b.c.d). It reports found false when
// no socket has that pair: the socket was closed, or it lives in another
// network namespace or on another host. A server passes its connection's
// remote address as local and its own address as remote to learn which
// local user connected to it.
func (fs FS) TCPSocketOwner(local, remote netip.AddrPort) (owner SocketOwner, found bool, err error) {
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fs.Path("self", "net", name))
		if err != nil {
			if os.IsNotExist(err) && name == "tcp6" {
				break // no IPv6 in this kernel
			}
			return SocketOwner{}, false, fmt.Errorf("read TCP socket table: %w", err)
		}
		owner, found, err = parseTCPSocketOwner(b, local, remote)
		if err != nil {
			return SocketOwner{}, false, fmt.Errorf("read TCP socket table %s: %w", fs.Path("self", "net", name), err)
		}
		if found {
			return owner, true, nil
		}
	}
	return SocketOwner{}, false, nil
}

// parseTCPSocketOwner scans a /proc/net/tcp or tcp6 table for the socket
// local -> remote. Each line after the header is
//
//	sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
//
// with addresses as hex words of the address in the host's byte order and
// the port in hex. Addresses are compared unmapped, so ::ffff:127.0.0.1
// matches 127.0.0.1.
func parseTCPSocketOwner(b []byte, local, remote netip.AddrPort) (SocketOwner, bool, error) {
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	var owner SocketOwner
	found := false
	err := socketTable(b, func(f [][]byte, line []byte) (bool, error) {
		l, err := parseSocketAddr(f[1])
		if err != nil || l != local {
			return false, err
		}
		r, err := parseSocketAddr(f[2])
		if err != nil || r != remote {
			return false, err
		}
		uid, err1 := strconv.ParseUint(string(f[7]), 10, 32)
		ino, err2 := strconv.ParseUint(string(f[9]), 10, 64)
		if err1 != nil || err2 != nil {
			return false, fmt.Errorf("socket line %q: bad uid or inode: %w", line, ErrParse)
		}
		owner, found = SocketOwner{UID: int(uid), Inode: ino}, true
		return true, nil
	})
	if err != nil {
		return SocketOwner{}, false, err
	}
	return owner, found, nil
}

// socketTable calls fn with the first 10 fields of each socket line of a
// net/tcp or tcp6 table, the header and blank lines left out, until fn says
// stop. A line of fewer than 10 fields is an ErrParse. It allocates
// nothing per line: a busy host's table has tens of thousands.
func socketTable(b []byte, fn func(f [][]byte, line []byte) (stop bool, err error)) error {
	first := true
	var fa [10][]byte
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if first {
			first = false
			continue // the header
		}
		f := fa[:0]
		for rest := line; len(f) < len(fa); {
			rest = skipSpace(rest)
			if len(rest) == 0 {
				break
			}
			end := bytes.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			f, rest = append(f, rest[:end]), rest[end:]
		}
		if len(f) == 0 {
			continue
		}
		if len(f) < 10 {
			return fmt.Errorf("socket line of %d fields, want 10 or more: %w", len(f), ErrParse)
		}
		if stop, err := fn(f, line); stop || err != nil {
			return err
		}
	}
	return nil
}

// parseSocketAddr reads "0100007F:1F90" (IPv4) or 32 hex digits and a port
// (IPv6): each 8-digit word is a 32-bit value in the host's byte order.
func parseSocketAddr(b []byte) (netip.AddrPort, error) {
	a, p, ok := bytes.Cut(b, []byte{':'})
	if !ok || len(p) != 4 || (len(a) != 8 && len(a) != 32) {
		return netip.AddrPort{}, fmt.Errorf("socket address %q: %w", b, ErrParse)
	}
	port, ok := hexWord(p)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("socket address %q: %w", b, ErrParse)
	}
	var raw [16]byte
	for i := 0; i < len(a)/8; i++ {
		w, ok := hexWord(a[i*8 : i*8+8])
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("socket address %q: %w", b, ErrParse)
		}
		binary.NativeEndian.PutUint32(raw[i*4:], uint32(w))
	}
	var addr netip.Addr
	if len(a) == 8 {
		addr = netip.AddrFrom4([4]byte(raw[:4]))
	} else {
		addr = netip.AddrFrom16(raw).Unmap()
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// hexWord reads 1 to 8 hex digits.
func hexWord(b []byte) (uint32, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint32(c)
	}
	return v, true
}
