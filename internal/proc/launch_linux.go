//go:build linux

package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Launched is a command started stopped at its first instruction (after
// exec, under ptrace), so counting or sampling can begin before it runs:
// one implementation for profile and syscalls.
type Launched struct {
	Cmd *exec.Cmd
}

// StartStopped starts cmd traced, so the kernel stops it right after exec,
// before any code of the new program runs. The calling goroutine is locked
// to its OS thread until Resume (the tracer is that thread), so call Resume
// from the same goroutine (Options.Started does, as Sample runs there).
func StartStopped(cmd *exec.Cmd) (*Launched, error) {
	runtime.LockOSThread()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			runtime.UnlockOSThread()
			return nil, fmt.Errorf("wait for %s to stop at exec: %w", cmd.Path, err)
		}
		break
	}
	if !ws.Stopped() {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("start %s: it did not stop at exec (status %v)", cmd.Path, ws)
	}
	return &Launched{Cmd: cmd}, nil
}

// Resume detaches from the command and lets it run.
func (l *Launched) Resume() error {
	defer runtime.UnlockOSThread()
	if err := unix.PtraceDetach(l.Cmd.Process.Pid); err != nil {
		return fmt.Errorf("resume %s: %w", l.Cmd.Path, err)
	}
	return nil
}

// SelfExe is this executable: the helpers gosleuth starts (the syscall
// counters' releaser, the tracefs guard) are copies of it, told their
// role by their environment.
const SelfExe = "/proc/self/exe"

// StartHelper starts exe (SelfExe, or a stand-in in tests) as a helper of
// this process: in a session of its own, so a terminal's signals do not
// reach it and it outlives this process, with env added to its
// environment and f as its descriptor 3. The caller closes its f once
// started; the helper holds its own copy.
func StartHelper(exe string, env []string, f *os.File) (*exec.Cmd, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a helper process: %w", err)
	}
	return cmd, nil
}
