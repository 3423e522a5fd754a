//go:build linux

package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Taskstats over generic netlink: one question per process, many questions
// per syscall. The kernel's TASKSTATS family answers TASKSTATS_CMD_GET with
// TASKSTATS_CMD_ATTR_TGID by summing, over the live threads of the thread
// group, their voluntary and involuntary switches and CPU times
// (kernel/taskstats.c, fill_stats_for_tgid): if none of them moved since
// the last answer, no thread of the process ran, and none of its per-thread
// files need reading.
//
// A TGID answer carries those sums (and the delay sums) and nothing else:
// ac_comm, ac_ppid, ac_uid, ac_btime and hiwater_rss are zero in it (Linux
// 6.18). They are filled in an answer about one thread
// (TASKSTATS_CMD_ATTR_PID, fill_stats), from that thread alone, and no
// answer says a process's state, current RSS or thread count: taskstats
// cannot stand for a process's stat at first sight.
//
// The framing is written here by hand rather than with a netlink library
// (mdlayher/genetlink is not among the module's dependencies): a refresh
// sends one datagram carrying a request per process and drains the replies
// with recvmmsg(2) into buffers allocated once, so a steady-state refresh
// allocates nothing and costs a few syscalls whatever the process count.

// tsBatch is the most requests sent in one datagram. Every reply (about
// 500 bytes, a kilobyte and more of socket memory) is queued on the socket
// before sendmsg returns: a batch must fit the receive buffer, or the
// kernel drops replies (ENOBUFS).
const tsBatch = 128

// tsReplySize is a receive slot: a reply is nlmsghdr, genlmsghdr, the
// nested TGID and the stats (sizeof(struct taskstats) is 440 bytes in
// version 17 and grows with new fields).
const tsReplySize = 1024

// sizeofGenlmsghdr is struct genlmsghdr (cmd, version, reserved u16).
const sizeofGenlmsghdr = 4

// tsReqSize is one request: nlmsghdr, genlmsghdr, one u32 attribute.
const tsReqSize = unix.SizeofNlMsghdr + sizeofGenlmsghdr + unix.SizeofNlAttr + 4

// tsRcvBuf is the receive buffer asked for: room for a batch of replies at
// their socket memory cost (truesize) with a margin.
const tsRcvBuf = 1 << 20

// ranSig is what a taskstats reply says about a whole process: it moves
// whenever a thread of the process runs (a switch out, a CPU tick), or one
// exits (its counts leave the sums). cpuCount and runNS are summed only
// with delay accounting on (sysctl kernel.task_delayacct), zero otherwise.
type ranSig struct {
	nvcsw, nivcsw, utimeUS, stimeUS, cpuCount, runNS uint64
}

// Field offsets in struct taskstats (include/uapi/linux/taskstats.h).
// The structure only grows at its end, so they hold for every version; a
// reply shorter than tsMinStats is refused.
var (
	offNvcsw      = int(unsafe.Offsetof(unix.Taskstats{}.Nvcsw))
	offNivcsw     = int(unsafe.Offsetof(unix.Taskstats{}.Nivcsw))
	offUtime      = int(unsafe.Offsetof(unix.Taskstats{}.Ac_utime))
	offStime      = int(unsafe.Offsetof(unix.Taskstats{}.Ac_stime))
	offCPUCount   = int(unsafe.Offsetof(unix.Taskstats{}.Cpu_count))
	offRunVirtual = int(unsafe.Offsetof(unix.Taskstats{}.Cpu_run_virtual_total))
	tsMinStats    = offNivcsw + 8
)

// errTaskstatsParse reports a reply that is not a well-formed taskstats
// answer.
var errTaskstatsParse = errors.New("malformed taskstats reply")

// tsReply is one decoded reply: the answer for tgid (errno 0), or the
// kernel's error for the request numbered seq (ESRCH: the process is gone).
type tsReply struct {
	seq   uint32
	tgid  uint32
	errno unix.Errno
	sig   ranSig
}

// parseTaskstatsReply decodes one netlink message from the TASKSTATS
// family (its id is family): a TASKSTATS_CMD_NEW answer, whose tgid comes
// from its nested TASKSTATS_TYPE_AGGR_TGID / TASKSTATS_TYPE_TGID attribute
// (or, for one thread, TASKSTATS_TYPE_AGGR_PID / TASKSTATS_TYPE_PID: its
// TID), or an NLMSG_ERROR, whose request is named by the echoed sequence
// number.
func parseTaskstatsReply(b []byte, family uint16) (tsReply, error) {
	var rep tsReply
	ne := binary.NativeEndian
	if len(b) < unix.SizeofNlMsghdr {
		return rep, fmt.Errorf("%w: %d bytes", errTaskstatsParse, len(b))
	}
	n := int(ne.Uint32(b))
	if n < unix.SizeofNlMsghdr || n > len(b) {
		return rep, fmt.Errorf("%w: length %d of %d", errTaskstatsParse, n, len(b))
	}
	b = b[:n]
	typ := ne.Uint16(b[4:])
	rep.seq = ne.Uint32(b[8:])
	body := b[unix.SizeofNlMsghdr:]
	switch typ {
	case unix.NLMSG_ERROR:
		// struct nlmsgerr: the error, then the request's header.
		if len(body) < unix.SizeofNlMsgerr {
			return rep, fmt.Errorf("%w: short error message", errTaskstatsParse)
		}
		code := int32(ne.Uint32(body))
		if code >= 0 {
			return rep, fmt.Errorf("%w: error message with code %d", errTaskstatsParse, code)
		}
		rep.errno = unix.Errno(-code)
		rep.seq = ne.Uint32(body[4+8:])
		return rep, nil
	case family:
	default:
		return rep, fmt.Errorf("%w: message type %d", errTaskstatsParse, typ)
	}
	if len(body) < sizeofGenlmsghdr {
		return rep, fmt.Errorf("%w: no genetlink header", errTaskstatsParse)
	}
	if body[0] != unix.TASKSTATS_CMD_NEW {
		return rep, fmt.Errorf("%w: command %d", errTaskstatsParse, body[0])
	}
	idType := uint16(unix.TASKSTATS_TYPE_TGID)
	agg, ok := findAttr(body[sizeofGenlmsghdr:], unix.TASKSTATS_TYPE_AGGR_TGID)
	if !ok {
		agg, ok = findAttr(body[sizeofGenlmsghdr:], unix.TASKSTATS_TYPE_AGGR_PID)
		idType = unix.TASKSTATS_TYPE_PID
	}
	if !ok {
		return rep, fmt.Errorf("%w: no TASKSTATS_TYPE_AGGR_TGID or _PID", errTaskstatsParse)
	}
	id, ok := findAttr(agg, idType)
	if !ok || len(id) < 4 {
		return rep, fmt.Errorf("%w: no TASKSTATS_TYPE_TGID or _PID", errTaskstatsParse)
	}
	rep.tgid = ne.Uint32(id)
	st, ok := findAttr(agg, unix.TASKSTATS_TYPE_STATS)
	if !ok || len(st) < tsMinStats {
		return rep, fmt.Errorf("%w: stats of %d bytes, want %d or more", errTaskstatsParse, len(st), tsMinStats)
	}
	u64 := func(off int) uint64 { return ne.Uint64(st[off:]) }
	rep.sig = ranSig{nvcsw: u64(offNvcsw), nivcsw: u64(offNivcsw), utimeUS: u64(offUtime), stimeUS: u64(offStime),
		cpuCount: u64(offCPUCount), runNS: u64(offRunVirtual)}
	return rep, nil
}

// findAttr returns the payload of the first netlink attribute of type typ
// in b (the nested and byte-order flags ignored).
func findAttr(b []byte, typ uint16) ([]byte, bool) {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofNlAttr {
		l := int(ne.Uint16(b))
		t := ne.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.SizeofNlAttr || l > len(b) {
			return nil, false
		}
		if t == typ {
			return b[unix.SizeofNlAttr:l], true
		}
		next := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if next >= len(b) {
			return nil, false
		}
		b = b[next:]
	}
	return nil, false
}

// mmsghdr is struct mmsghdr for recvmmsg(2), which x/sys/unix does not
// wrap.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// taskstatsConn is a generic netlink socket speaking to the TASKSTATS
// family. It is owned by one Reader.
type taskstatsConn struct {
	fd     int
	family uint16
	seq    uint32
	req    []byte
	slots  []byte // tsBatch receive slots of tsReplySize
	iov    []unix.Iovec
	msgs   []mmsghdr
	// Cost counters, read by the Reader into ReadStats.
	syscalls int
	lost     bool // a batch lost replies (ENOBUFS)
}

// openTaskstats opens the socket, resolves the family and asks about its
// own process once, so that a missing family (CONFIG_TASKSTATS off, or a
// network namespace other than the host's) or a missing CAP_NET_ADMIN is
// found now, not at every refresh. The error says which.
func openTaskstats() (*taskstatsConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("open generic netlink socket: %w", err)
	}
	c := &taskstatsConn{fd: fd}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		c.close()
		return nil, fmt.Errorf("bind generic netlink socket: %w", err)
	}
	// As root the buffer may exceed net.core.rmem_max; otherwise what is
	// granted bounds the batch below.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, tsRcvBuf) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, tsRcvBuf)
	}
	// Error messages need not echo the request's payload: its header
	// (and sequence number) is enough.
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	if c.family, err = c.resolveFamily(); err != nil {
		c.close()
		return nil, err
	}
	c.req = make([]byte, 0, tsBatch*tsReqSize)
	c.slots = make([]byte, tsBatch*tsReplySize)
	c.iov = make([]unix.Iovec, tsBatch)
	c.msgs = make([]mmsghdr, tsBatch)
	for i := range c.msgs {
		c.iov[i].Base = &c.slots[i*tsReplySize]
		c.iov[i].SetLen(tsReplySize)
		c.msgs[i].hdr.Iov = &c.iov[i]
		c.msgs[i].hdr.SetIovlen(1)
	}
	self := []int32{int32(os.Getpid())}
	var out [1]tsAnswer
	if err := c.query(self, out[:], unix.TASKSTATS_CMD_ATTR_TGID); err != nil {
		c.close()
		return nil, err
	}
	switch {
	case out[0].errno == unix.EPERM || out[0].errno == unix.EACCES:
		c.close()
		return nil, fmt.Errorf("taskstats: %w: needs CAP_NET_ADMIN", ErrPermission)
	case !out[0].ok:
		c.close()
		return nil, fmt.Errorf("taskstats: no answer about this process (%v)", out[0].errno)
	}
	return c, nil
}

func (c *taskstatsConn) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// resolveFamily asks the generic netlink controller for the id of the
// TASKSTATS family.
func (c *taskstatsConn) resolveFamily() (uint16, error) {
	ne := binary.NativeEndian
	name := unix.TASKSTATS_GENL_NAME + "\x00"
	alen := unix.SizeofNlAttr + len(name)
	n := unix.SizeofNlMsghdr + sizeofGenlmsghdr + (alen+3)&^3
	b := make([]byte, n)
	ne.PutUint32(b[0:], uint32(n))
	ne.PutUint16(b[4:], unix.GENL_ID_CTRL)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], 1)
	b[16] = unix.CTRL_CMD_GETFAMILY
	b[17] = 1
	ne.PutUint16(b[20:], uint16(alen))
	ne.PutUint16(b[22:], unix.CTRL_ATTR_FAMILY_NAME)
	copy(b[24:], name)
	if _, err := unix.Write(c.fd, b); err != nil {
		return 0, fmt.Errorf("resolve taskstats family: %w", err)
	}
	rb := make([]byte, 8192)
	m, _, err := unix.Recvfrom(c.fd, rb, 0)
	if err != nil {
		return 0, fmt.Errorf("resolve taskstats family: %w", err)
	}
	rb = rb[:m]
	if len(rb) < unix.SizeofNlMsghdr+sizeofGenlmsghdr {
		return 0, fmt.Errorf("resolve taskstats family: %w: reply of %d bytes", errTaskstatsParse, len(rb))
	}
	if ne.Uint16(rb[4:]) == unix.NLMSG_ERROR {
		code := int32(ne.Uint32(rb[unix.SizeofNlMsghdr:]))
		err := unix.Errno(-code)
		if err == unix.ENOENT {
			return 0, fmt.Errorf("resolve taskstats family: %w: no TASKSTATS family (CONFIG_TASKSTATS off, or another network namespace)", ErrNotSupported)
		}
		return 0, fmt.Errorf("resolve taskstats family: %w", err)
	}
	l := min(int(ne.Uint32(rb)), len(rb))
	id, ok := findAttr(rb[unix.SizeofNlMsghdr+sizeofGenlmsghdr:l], unix.CTRL_ATTR_FAMILY_ID)
	if !ok || len(id) < 2 {
		return 0, fmt.Errorf("resolve taskstats family: %w: no family id", errTaskstatsParse)
	}
	return ne.Uint16(id), nil
}

// tsAnswer is what a query learned about one process.
type tsAnswer struct {
	ok    bool       // sig holds its answer
	errno unix.Errno // the kernel's error (ESRCH: gone); 0 with !ok: no answer (lost)
	sig   ranSig
}

// query asks about every id in ids by attr (see batch) and fills out
// (parallel to ids). An id whose reply was lost (a full socket buffer) has
// neither ok nor errno: the caller reads it as without taskstats. The
// error is for the socket failing as a whole.
func (c *taskstatsConn) query(ids []int32, out []tsAnswer, attr uint16) error {
	c.lost = false
	for lo := 0; lo < len(ids); lo += tsBatch {
		hi := min(lo+tsBatch, len(ids))
		if err := c.batch(ids[lo:hi], out[lo:hi], attr); err != nil {
			return err
		}
	}
	return nil
}

// batch asks about each of tgids in one write, by attr:
// TASKSTATS_CMD_ATTR_TGID (a whole process) or TASKSTATS_CMD_ATTR_PID (one
// thread, its TID in tgids).
func (c *taskstatsConn) batch(tgids []int32, out []tsAnswer, attr uint16) error {
	ne := binary.NativeEndian
	base := c.seq + 1
	c.seq += uint32(len(tgids))
	c.req = c.req[:len(tgids)*tsReqSize]
	for i, tgid := range tgids {
		out[i] = tsAnswer{}
		b := c.req[i*tsReqSize:]
		ne.PutUint32(b[0:], tsReqSize)
		ne.PutUint16(b[4:], c.family)
		ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
		ne.PutUint32(b[8:], base+uint32(i))
		ne.PutUint32(b[12:], 0)
		b[16] = unix.TASKSTATS_CMD_GET
		b[17] = 1 // TASKSTATS_GENL_VERSION
		ne.PutUint16(b[18:], 0)
		ne.PutUint16(b[20:], unix.SizeofNlAttr+4)
		ne.PutUint16(b[22:], attr)
		ne.PutUint32(b[24:], uint32(tgid))
	}
	c.syscalls++
	if _, err := rawWrite(c.fd, c.req); err != nil {
		return fmt.Errorf("send taskstats requests: %w", err)
	}
	// The kernel answers every request inside the write: the replies are
	// queued already, so the socket is drained without waiting.
	for {
		c.syscalls++
		r1, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.msgs[0])),
			uintptr(len(c.msgs)), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno == unix.EAGAIN {
			return nil
		}
		if errno == unix.ENOBUFS {
			c.lost = true // replies dropped: the caller reads those processes' threads
			continue
		}
		if errno != 0 {
			return fmt.Errorf("receive taskstats replies: %w", errno)
		}
		n := int(r1)
		for i := range n {
			m := c.slots[i*tsReplySize : i*tsReplySize+int(c.msgs[i].n)]
			rep, err := parseTaskstatsReply(m, c.family)
			if err != nil {
				continue
			}
			k := int(rep.seq - base)
			if rep.seq < base || k >= len(tgids) {
				continue // a stale reply of an earlier batch
			}
			if rep.errno != 0 {
				out[k] = tsAnswer{errno: rep.errno}
				continue
			}
			if int32(rep.tgid) != tgids[k] {
				continue // not the process asked about: count it lost
			}
			out[k] = tsAnswer{ok: true, sig: rep.sig}
		}
		if n < len(c.msgs) {
			return nil
		}
	}
}
