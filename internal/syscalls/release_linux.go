//go:build linux

package syscalls

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/perf"
)

// The release of a tracepoint's last perf event waits for an RCU grace
// period under the kernel's event_mutex, so releasing ~360 tracepoints
// takes some 10 s whether the descriptors are closed one by one, from
// many threads, or by the exit of the process that holds them. A view
// about to exit hands its descriptors to a releaser: a copy of this
// executable, started with releaseEnv set, that receives them over a
// socket, acknowledges, waits until the socket's other end is closed (the
// view has dropped its own references, so the releaser's are the last)
// and closes them, while the view exits at once. The releaser is in its
// own session and writes nowhere, so neither a terminal's signals nor a
// pipe to the view's output wait for it.

// releaseEnv marks the releaser process.
const releaseEnv = "GOSLEUTH_RELEASE_PERF_FDS"

// releaseBatch is the descriptors sent in one message (the kernel takes
// at most 253).
const releaseBatch = 200

func init() {
	if os.Getenv(releaseEnv) == "1" {
		os.Exit(releaser(3))
	}
}

// releaser receives descriptors on sock until the end message, answers,
// waits for the sender to close its end, and closes them.
func releaser(sock int) int {
	perf.RaiseFDLimit()
	var fds []int
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(releaseBatch*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break // the sender went away: release what came
		}
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, m := range msgs {
				if got, err := unix.ParseUnixRights(&m); err == nil {
					fds = append(fds, got...)
				}
			}
		}
		if buf[0] == 'e' {
			unix.Write(sock, []byte{'k'})
			for {
				n, err := unix.Read(sock, buf)
				if err != unix.EINTR && (err != nil || n == 0) {
					break
				}
			}
			break
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return 0
}

// handOff gives a releaser process its own references to fds; once it
// returns nil, closing fds here is quick and the releaser pays the kernel's
// wait. The caller must close them: the releaser holds its copies until
// then.
func handOff(fds []int) (done func(), err error) {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hand perf events to a releaser: %w", err)
	}
	theirs := os.NewFile(uintptr(sp[1]), "releaser socket")
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), releaseEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(sp[0])
		return nil, fmt.Errorf("hand perf events to a releaser: %w", err)
	}
	go cmd.Wait() // reaped when it ends, if this process still runs
	fail := func(err error) (func(), error) {
		unix.Close(sp[0])
		return nil, fmt.Errorf("hand perf events to a releaser: %w", err)
	}
	for i := 0; i < len(fds); i += releaseBatch {
		batch := fds[i:min(i+releaseBatch, len(fds))]
		if err := unix.Sendmsg(sp[0], []byte{'f'}, unix.UnixRights(batch...), nil, 0); err != nil {
			return fail(err)
		}
	}
	if err := unix.Sendmsg(sp[0], []byte{'e'}, nil, nil, 0); err != nil {
		return fail(err)
	}
	// The answer says the releaser holds every descriptor; without it
	// (it could not start, or is stuck) the caller releases them itself.
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(sp[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	b := make([]byte, 1)
	for {
		n, err := unix.Read(sp[0], b)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 || b[0] != 'k' {
			return fail(fmt.Errorf("no answer from the releaser (%d bytes, %v)", n, err))
		}
		break
	}
	return func() { unix.Close(sp[0]) }, nil
}
