//go:build linux

package syscalls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// The release of a tracepoint's last perf event waits for an RCU grace
// period under the kernel's event_mutex, so releasing ~360 tracepoints
// takes some 10 s whether the descriptors are closed one by one, from
// many threads, or by the exit of the process that holds them. So a
// Counter starts a releaser when it attaches: a copy of this executable,
// started with releaseEnv set, in its own session and writing nowhere,
// that receives its own reference to every event over a socket whose
// other end only this process holds, as the events are opened. Once this
// process begins to exit, however it ends (a normal exit after Detach, an
// error, SIGKILL), the releaser disables every event that may still count
// (PERF_EVENT_IOC_DISABLE on each group leader and standalone event, as
// Counter.Disable does), so the target stops paying at once; once that
// end has closed it closes them and exits. This process's own references
// then go in milliseconds: the releaser's are the last, and it pays the
// kernel's wait. The start of the exit is seen in the PF_EXITING flag of
// this process (looked at every ownerPoll) or, where that cannot be read,
// in the socket's end of file.

// releaseEnv marks the releaser process, and ownerEnv names the process
// whose events it holds.
const (
	releaseEnv = "GOSLEUTH_RELEASE_PERF_FDS"
	ownerEnv   = "GOSLEUTH_RELEASE_OWNER"
)

// ownerPoll is how often the releaser looks whether its owner has begun
// to exit. The socket's end of file alone can come seconds late: a
// process's exit closes its files one after another, and the release of
// the events it holds alone (another view's tracepoints, BPF links) may
// come first.
const ownerPoll = 50 * time.Millisecond

// ownerExitWait bounds the releaser's wait for the end of its owner's
// exit once the socket has closed: the events of a process that
// detached and lives on (a test) are released this much later.
const ownerExitWait = 2 * time.Second

// releaserExe is the executable started as the releaser.
var releaserExe = proc.SelfExe

// releaseBatch is the descriptors sent in one message (the kernel takes
// at most 253).
const releaseBatch = 200

// The messages to a releaser, by their first byte, and its answer.
const (
	// msgHold carries descriptors to hold; byte 1+i is 1 when the i-th
	// is to be disabled before the release (a group leader or a
	// standalone event). The releaser numbers what it holds in the order
	// received, from 0.
	msgHold = 'f'
	// msgDrop is followed by two native uint32, first and n: close the
	// held descriptors numbered first to first+n-1 now.
	msgDrop = 'c'
	// msgDetach says the sender has disabled its events and is about to
	// close its references: answer, and release once the socket closes.
	msgDetach = 'e'
	// msgRelease says the sender releases the events itself: close every
	// held descriptor, answer and exit.
	msgRelease = 'x'
	// msgAck is the releaser's answer.
	msgAck = 'k'
)

func init() {
	if os.Getenv(releaseEnv) == "1" {
		owner, err := strconv.Atoi(os.Getenv(ownerEnv))
		if err != nil {
			owner = 0
		}
		ownerFD := -1
		if owner > 0 {
			ownerFD, _ = unix.PidfdOpen(owner, 0)
		}
		if owner != os.Getppid() {
			// Gone already (the pid may be another's now): the
			// socket's end of file says so.
			owner = 0
			if ownerFD >= 0 {
				unix.Close(ownerFD)
				ownerFD = -1
			}
		}
		os.Exit(releaser(3, owner, ownerFD))
	}
}

// releaser holds the descriptors it receives on sock and obeys the
// messages above until the socket's other end closes; then it disables
// the events marked for it and closes every one. Once owner (0: none) has
// begun to exit, it disables them at once, and still closes them only at
// the end of file: its own references must be the last. With ownerFD (a
// pidfd of owner, -1 for none) it waits, up to ownerExitWait, for owner's
// exit to be complete before it releases anything: the release of each
// tracepoint holds the kernel's event_mutex for a grace period, which the
// rest of owner's exit may need too (to remove its uprobes).
func releaser(sock, owner, ownerFD int) int {
	perf.RaiseFDLimit()
	var held []int // by number, -1 once closed
	var disable []bool
	disableAll := func() {
		for i, fd := range held {
			if fd >= 0 && disable[i] {
				unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
			}
		}
	}
	buf := make([]byte, 1+releaseBatch)
	oob := make([]byte, unix.CmsgSpace(releaseBatch*4))
	// exiting: owner has begun to exit; stopped: the events are disabled.
	exiting, stopped := false, false
	for {
		if owner > 0 && !exiting {
			pfd := []unix.PollFd{{Fd: int32(sock), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, int(ownerPoll/time.Millisecond))
			if err != nil {
				continue // EINTR
			}
			if n == 0 {
				exiting = proc.Exiting(owner)
				continue
			}
		}
		flags := unix.MSG_CMSG_CLOEXEC
		if exiting && !stopped {
			// What is queued was sent before the exit: take it,
			// then stop every event.
			flags |= unix.MSG_DONTWAIT
		}
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, flags)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN && flags&unix.MSG_DONTWAIT != 0 {
			disableAll()
			stopped = true
			continue // and wait for the end of file
		}
		if err != nil || n == 0 {
			break // the sender is gone
		}
		var got []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					got = append(got, fds...)
				}
			}
		}
		switch buf[0] {
		case msgHold:
			// n-1 descriptors were sent; fewer arrive only past
			// RLIMIT_NOFILE, and the numbering keeps a place for
			// each (the sender's own references stay the last for
			// those).
			for i := range max(n-1, len(got)) {
				fd := -1
				if i < len(got) {
					fd = got[i]
				}
				held = append(held, fd)
				disable = append(disable, 1+i < n && buf[1+i] == 1)
			}
			continue
		case msgDrop:
			if n >= 9 {
				first := int(binary.NativeEndian.Uint32(buf[1:]))
				last := first + int(binary.NativeEndian.Uint32(buf[5:]))
				for i := first; i < last && i < len(held); i++ {
					closeHeld(held, i)
				}
			}
		case msgDetach:
			unix.Write(sock, []byte{msgAck})
		case msgRelease:
			for i := range held {
				closeHeld(held, i)
			}
			unix.Write(sock, []byte{msgAck})
			return 0
		}
		for _, fd := range got {
			unix.Close(fd)
		}
	}
	disableAll()
	if ownerFD >= 0 {
		pfd := []unix.PollFd{{Fd: int32(ownerFD), Events: unix.POLLIN}}
		for deadline := time.Now().Add(ownerExitWait); time.Now().Before(deadline); {
			if n, err := unix.Poll(pfd, int(time.Until(deadline)/time.Millisecond)+1); err != unix.EINTR || n > 0 {
				break
			}
		}
	}
	for i := range held {
		closeHeld(held, i)
	}
	return 0
}

func closeHeld(held []int, i int) {
	if held[i] >= 0 {
		unix.Close(held[i])
		held[i] = -1
	}
}

// releaserConn is this process's end of a releaser's socket.
type releaserConn struct {
	sock    int   // -1 once closed
	held    int   // descriptors sent, the number the next one gets
	dropped int   // descriptors it was told to close
	err     error // the first failure; the releaser is then of no use
}

// startReleaser starts a releaser process for this process's events.
func startReleaser() (*releaserConn, error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start a perf event releaser: %w", err)
	}
	theirs := os.NewFile(uintptr(sp[1]), "releaser socket")
	cmd, err := proc.StartHelper(releaserExe, []string{releaseEnv + "=1", ownerEnv + "=" + strconv.Itoa(os.Getpid())}, theirs)
	theirs.Close()
	if err != nil {
		unix.Close(sp[0])
		return nil, fmt.Errorf("start a perf event releaser: %w", err)
	}
	go cmd.Wait() // reaped when it ends, if this process still runs
	// A releaser that stops reading (stuck, or slow to start on a loaded
	// machine) must not hold an attach for long: a send that cannot go
	// within this time fails, and the events are then released as if
	// there were no releaser.
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(sp[0], unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	return &releaserConn{sock: sp[0]}, nil
}

// usable says whether r holds, or can be given, descriptors.
func (r *releaserConn) usable() bool { return r != nil && r.err == nil && r.sock >= 0 }

// send sends one message, with descriptors fds if any.
func (r *releaserConn) send(msg []byte, fds []int) error {
	if !r.usable() {
		return errors.New("no perf event releaser")
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err := unix.Sendmsg(r.sock, msg, oob, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			r.err = fmt.Errorf("send to the perf event releaser: %w", err)
		}
		return r.err
	}
}

// hold gives the releaser its own references to fds, to disable all of
// them before the release, or the first only when leaderOnly (a group,
// disabled through its leader), and returns the number of the first.
func (r *releaserConn) hold(fds []int, leaderOnly bool) (first int, err error) {
	first = r.held
	for i := 0; i < len(fds); i += releaseBatch {
		batch := fds[i:min(i+releaseBatch, len(fds))]
		msg := make([]byte, 1+len(batch))
		msg[0] = msgHold
		for j := range batch {
			if !leaderOnly || i+j == 0 {
				msg[1+j] = 1
			}
		}
		if err := r.send(msg, batch); err != nil {
			return 0, err
		}
		r.held += len(batch)
	}
	return first, nil
}

// drop has the releaser close the n descriptors it holds from first on.
func (r *releaserConn) drop(first, n int) {
	if n <= 0 || !r.usable() {
		return
	}
	msg := make([]byte, 9)
	msg[0] = msgDrop
	binary.NativeEndian.PutUint32(msg[1:], uint32(first))
	binary.NativeEndian.PutUint32(msg[5:], uint32(n))
	if r.send(msg, nil) == nil {
		r.dropped += n
	}
}

// ask sends msg and waits up to 2 s for the answer, which says the
// releaser has read every message before it.
func (r *releaserConn) ask(msg byte) error {
	if err := r.send([]byte{msg}, nil); err != nil {
		return err
	}
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(r.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	b := make([]byte, 1)
	for {
		n, err := unix.Read(r.sock, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 || b[0] != msgAck {
			r.err = fmt.Errorf("no answer from the perf event releaser (%d bytes, %v)", n, err)
			return r.err
		}
		return nil
	}
}

// detach has the releaser take over the release: once it returns nil,
// closing this process's references is quick, and close lets the
// releaser release (closing the socket is the signal).
func (r *releaserConn) detach() error { return r.ask(msgDetach) }

// release has the releaser close its references at once and exit, so
// this process's are the last and closing them waits for the kernel.
func (r *releaserConn) release() {
	if r.usable() && r.held > 0 {
		r.ask(msgRelease)
	}
	r.close()
}

// close closes this end of the socket: the releaser disables and
// releases what it still holds.
func (r *releaserConn) close() {
	if r != nil && r.sock >= 0 {
		unix.Close(r.sock)
		r.sock = -1
	}
}
