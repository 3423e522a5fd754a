package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

func TestSyscallsBadInput(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		code  int
		words string
	}{
		{"no target", []string{"syscalls"}, 2, "give --pid PID or -- CMD"},
		{"pid and command", []string{"syscalls", "--pid", "1", "--", "true"}, 2, "not both"},
		{"negative pid", []string{"syscalls", "--pid", "-3"}, 2, "invalid pid"},
		{"malformed pid", []string{"syscalls", "--pid", "abc"}, 2, "invalid value"},
		{"negative duration", []string{"syscalls", "--pid", "1", "--duration", "-1s"}, 2, "--duration must not be negative"},
		{"huge duration", []string{"syscalls", "--pid", "1", "--duration", "25h"}, 2, "--duration must be at most 24h"},
		{"malformed duration", []string{"syscalls", "--pid", "1", "--duration", "soon"}, 2, `invalid value "soon" for flag -duration`},
		{"bad format", []string{"syscalls", "--pid", "1", "--format", "xml"}, 2, "text or json"},
		{"bad mode", []string{"syscalls", "--pid", "1", "--mode", "bpf"}, 2, "auto, exact or proc"},
		{"short interval", []string{"syscalls", "--pid", "1", "--interval", "1ms"}, 2, "at least 100ms"},
		{"unknown syscall", []string{"syscalls", "--pid", "1", "--duration", "1s", "--only", "read,futx"}, 2, "did you mean futex"},
		{"only in proc mode", []string{"syscalls", "--pid", "1", "--only", "read", "--mode", "proc"}, 2, "needs the exact mode"},
		{"output a directory", []string{"syscalls", "--pid", "1", "-o", os.TempDir()}, 1, "is a directory"},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, struct {
			name  string
			args  []string
			code  int
			words string
		}{"pid not found", []string{"syscalls", "--pid", "536870000", "--duration", "1s"}, 1, "process 536870000 not found"})
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, &out, &out)
			if code := exitCode(err, devNull); code != tt.code || err == nil || !strings.Contains(err.Error(), tt.words) {
				t.Errorf("exit %d (want %d), error %v (want %q)", code, tt.code, err, tt.words)
			}
		})
	}
}

// syscallsNoise is what the Go runtime (and the patient's handshake) may
// call besides the patient's getppid: counted by name so that "other"
// (every syscall not named) must stay empty.
const syscallsNoise = "getppid,futex,nanosleep,getpid,tgkill,rt_sigreturn,mmap,munmap,madvise,sched_yield," +
	"epoll_pwait,read,write,clone,clone3,rt_sigprocmask,sigaltstack,gettid,mprotect,prctl,exit,execve,exit_group," +
	"wait4,waitid,pidfd_open,pidfd_send_signal,close,openat,fcntl,pipe2,dup3,epoll_ctl,epoll_create1,rt_sigaction," +
	"sched_getaffinity,getrlimit,prlimit64,arch_prctl,set_tid_address,set_robust_list,rseq,uname,fstat,newfstatat,readlinkat," +
	"getrandom,brk,access,statx,lseek,pread64,ioctl,eventfd2"

// syscallsPatient builds internal/syscalls/testdata/patient into a
// directory every user can read.
func syscallsPatient(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "../../internal/syscalls/testdata/patient")
}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.Tracefs)
}

type syscallsJSON struct {
	Mode     string `json:"mode"`
	Reason   string `json:"reason"`
	PID      int    `json:"pid"`
	Total    uint64 `json:"total"`
	Threads  int    `json:"threads"`
	Exited   bool   `json:"exited"`
	ExitCode *int   `json:"exit_code"`
	Syscalls []struct {
		Name  string `json:"name"`
		Nr    int    `json:"nr"`
		Count uint64 `json:"count"`
	} `json:"syscalls"`
	Approx *struct {
		Samples int `json:"samples"`
		Blocked []struct {
			Name string `json:"name"`
		} `json:"blocked"`
	} `json:"approx"`
}

func (s *syscallsJSON) count(name string) uint64 {
	for _, r := range s.Syscalls {
		if r.Name == name {
			return r.Count
		}
	}
	return 0
}

func parseSyscalls(t *testing.T, stdout string) *syscallsJSON {
	t.Helper()
	var rep syscallsJSON
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("output is not one JSON report: %v\n%s", err, stdout)
	}
	return &rep
}

// cliChild starts the CLI in a child process and returns it with its
// stdout buffer and a reader of its stderr lines.
func cliChild(t *testing.T, cred *syscall.Credential, bin string, args ...string) (*exec.Cmd, *bytes.Buffer, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = childEnv(args)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &out, bufio.NewReader(errp)
}

// waitCounting reads the CLI's stderr until it says it is counting.
func waitCounting(t *testing.T, errs *bufio.Reader) string {
	t.Helper()
	for {
		line, err := errs.ReadString('\n')
		if err != nil {
			t.Fatalf("CLI ended before counting: %v (last %q)", err, line)
		}
		if strings.Contains(line, "counting syscalls of pid") {
			go io.Copy(io.Discard, errs)
			return line
		}
	}
}

// TestSyscallsExactPID counts a patient making 200,000 getppid calls in 4
// threads; the patient exits before the window ends, which must end it
// with the counts so far.
func TestSyscallsExactPID(t *testing.T) {
	needRoot(t)
	p := exec.Command(syscallsPatient(t), "-threads", "4", "-calls", "50000")
	in, _ := p.StdinPipe()
	outp, _ := p.StdoutPipe()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	pout := bufio.NewReader(outp)
	if l, _ := pout.ReadString('\n'); l != "ready\n" {
		t.Fatalf("patient said %q", l)
	}
	cmd, stdout, errs := cliChild(t, nil, os.Args[0], "syscalls", "--pid", strconv.Itoa(p.Process.Pid),
		"--duration", "2m", "--format", "json", "--only", syscallsNoise)
	waitCounting(t, errs)
	io.WriteString(in, "go\n")
	if l, _ := pout.ReadString('\n'); l != "done\n" {
		t.Fatalf("patient said %q", l)
	}
	in.Close() // the patient exits: the CLI must notice and report
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CLI: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("CLI did not end when its target exited")
	}
	rep := parseSyscalls(t, stdout.String())
	if rep.Mode != "exact" || !rep.Exited {
		t.Errorf("mode %q exited %v, want exact and true", rep.Mode, rep.Exited)
	}
	if n := rep.count("getppid"); n != 200000 {
		t.Errorf("getppid counted %d, want 200000", n)
	}
	if n := rep.count("other"); n != 0 {
		t.Errorf("%d calls outside the named ones: %+v", n, rep.Syscalls)
	}
	if rep.Threads < 5 {
		t.Errorf("attached to %d threads, want >= 5", rep.Threads)
	}
}

// TestSyscallsCommand runs a command that starts a child process: both
// are counted, from the first instruction after execve.
func TestSyscallsCommand(t *testing.T) {
	needRoot(t)
	stdout, stderr, code := runChild(t, os.Args[0], nil, "syscalls", "--format", "json", "--only", syscallsNoise,
		"--", syscallsPatient(t), "-solo", "-child", "-threads", "3", "-calls", "20000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep := parseSyscalls(t, stdout)
	if n := rep.count("getppid"); n != 80000 {
		t.Errorf("getppid %d, want 80000 (3 threads and a child, 20000 each)", n)
	}
	if n := rep.count("execve"); n != 1 {
		t.Errorf("execve %d, want 1: the child's (the command's own is before counting starts)", n)
	}
	if n := rep.count("other"); n != 0 {
		t.Errorf("%d calls outside the named ones: %+v", n, rep.Syscalls)
	}
	if !rep.Exited || rep.ExitCode == nil || *rep.ExitCode != 0 {
		t.Errorf("exited %v, code %v", rep.Exited, rep.ExitCode)
	}
}

// TestSyscallsUnprivileged runs the CLI as user nobody on a patient of
// nobody's: it must fall back to the /proc mode, say why and how to get
// exact counts, and still show where the threads wait.
func TestSyscallsUnprivileged(t *testing.T) {
	needRoot(t)
	p := exec.Command(syscallsPatient(t), "-loop")
	p.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	bin := nobodyBinary(t)
	stdout, stderr, code := runChild(t, bin, nobody, "syscalls", "--pid", strconv.Itoa(p.Process.Pid),
		"--duration", "1s", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rep := parseSyscalls(t, stdout)
	if rep.Mode != "proc" || !strings.Contains(rep.Reason, "root") {
		t.Errorf("mode %q reason %q: want proc, telling how to get exact counts", rep.Mode, rep.Reason)
	}
	if rep.Approx == nil || rep.Approx.Samples < 20 || len(rep.Approx.Blocked) == 0 {
		t.Errorf("no wait profile: %+v", rep.Approx)
	}
}

// TestSyscallsSIGKILL kills the CLI while it counts a command: the
// command must keep running, not left stopped (gosleuth starts it under
// ptrace) and holding no perf event descriptor (they are close-on-exec;
// had it inherited one, the events would outlive gosleuth). The kernel
// frees events with their last descriptor.
func TestSyscallsSIGKILL(t *testing.T) {
	needRoot(t)
	progress := filepath.Join(t.TempDir(), "progress")
	cmd, _, errs := cliChild(t, nil, os.Args[0], "syscalls", "--duration", "2m", "--only", "getppid,futex,nanosleep",
		"--", syscallsPatient(t), "-loop", "-progress", progress)
	line := waitCounting(t, errs)
	f := strings.Fields(line[strings.Index(line, "pid "):])
	target, _ := strconv.Atoi(f[1])
	if target <= 0 {
		t.Fatalf("no pid in %q", line)
	}
	defer syscall.Kill(target, syscall.SIGKILL)
	if n, _ := kernelFDs(cmd.Process.Pid); n == 0 {
		t.Fatalf("the CLI holds no perf event descriptors while counting: the check below proves nothing")
	}
	during := cpuPerCall(t, progress)
	cmd.Process.Signal(syscall.SIGKILL)
	// Not cmd.Wait: the target still holds the CLI's stdout pipe.
	cmd.Process.Wait()
	after := cpuPerCall(t, progress)
	// A counted getppid costs the target about twice its plain cost here;
	// if any event were still attached, it would cost as much as before.
	t.Logf("target CPU per getppid: %.0f ns while counted, %.0f ns after the kill", during, after)
	if during < 1.25*after {
		t.Errorf("getppid costs %.0f ns while counted and %.0f ns after gosleuth was killed: still counted?", during, after)
	}
	switch st := procState(target); st {
	case "":
		t.Fatalf("target gone after the CLI was killed")
	case "t", "T":
		t.Errorf("target left stopped (state %s)", st)
	}
	if n, _ := kernelFDs(target); n != 0 {
		t.Errorf("target holds %d perf event descriptors", n)
	}
}

// cpuPerCall returns the target's CPU ns per getppid over about 400 ms,
// the median of three windows, from the file its -progress flag writes.
func cpuPerCall(t *testing.T, file string) float64 {
	t.Helper()
	read := func() (calls, cpu float64) {
		for range 100 {
			if b, err := os.ReadFile(file); err == nil {
				if _, err := fmt.Sscan(string(b), &calls, &cpu); err == nil {
					return calls, cpu
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no progress from the target in %s", file)
		return 0, 0
	}
	var per []float64
	c0, u0 := read()
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		c1, u1 := read()
		if c1 > c0 {
			per = append(per, (u1-u0)/(c1-c0))
		}
		c0, u0 = c1, u1
	}
	if len(per) == 0 {
		t.Fatal("the target made no progress")
	}
	slices.Sort(per)
	return per[len(per)/2]
}

// TestSyscallsErrors counts the failed calls of a patient whose 2 threads
// each make 3000 close(-1) calls: 6000 EBADF, exactly (the threads exist
// before attach, and only failures are written to the rings).
func TestSyscallsErrors(t *testing.T) {
	needRoot(t)
	p := exec.Command(syscallsPatient(t), "-threads", "2", "-calls", "1000", "-fail", "3000")
	in, _ := p.StdinPipe()
	outp, _ := p.StdoutPipe()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	pout := bufio.NewReader(outp)
	if l, _ := pout.ReadString('\n'); l != "ready\n" {
		t.Fatalf("patient said %q", l)
	}
	cmd, stdout, errs := cliChild(t, nil, os.Args[0], "syscalls", "--pid", strconv.Itoa(p.Process.Pid),
		"--duration", "2m", "--format", "json", "--errors", "--only", "getppid,close")
	waitCounting(t, errs)
	io.WriteString(in, "go\n")
	if l, _ := pout.ReadString('\n'); l != "done\n" {
		t.Fatalf("patient said %q", l)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("CLI: %v", err)
	}
	var rep struct {
		Lost     uint64 `json:"lost"`
		Syscalls []struct {
			Name   string  `json:"name"`
			Count  uint64  `json:"count"`
			Errors *uint64 `json:"errors"`
		} `json:"syscalls"`
		ByErrno []struct {
			Name  string `json:"name"`
			Errno string `json:"errno"`
			Count uint64 `json:"count"`
		} `json:"errors_by_errno"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	var ebadf uint64
	for _, e := range rep.ByErrno {
		if e.Name == "close" && e.Errno == "EBADF" {
			ebadf = e.Count
		}
	}
	if ebadf != 6000 || rep.Lost != 0 {
		t.Errorf("close EBADF %d (lost %d), want 6000: %+v", ebadf, rep.Lost, rep.ByErrno)
	}
	for _, s := range rep.Syscalls {
		if s.Name == "close" && (s.Errors == nil || *s.Errors != ebadf || s.Count < 6000) {
			t.Errorf("close row %+v", s)
		}
	}
}

// TestSyscallsOtherUsersProcess runs the CLI as user nobody on root's
// process: nothing of it is readable, so it must fail with one line
// saying so (it printed an all-zero report and exited 0).
func TestSyscallsOtherUsersProcess(t *testing.T) {
	needRoot(t)
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	_, stderr, code := runChild(t, nobodyBinary(t), nobody, "syscalls", "--pid", strconv.Itoa(p.Process.Pid), "--duration", "1s")
	if code != 1 || !strings.Contains(stderr, "permission denied") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestSyscallsOutputFile: -o receives the whole report in --format, and
// stdout stays empty.
func TestSyscallsOutputFile(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"syscalls", "--pid", strconv.Itoa(p.Process.Pid), "--duration", "300ms",
		"--format", "json", "--only", "nanosleep", "-o", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		PID  int    `json:"pid"`
		Mode string `json:"mode"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.PID != p.Process.Pid || rep.Mode == "" {
		t.Errorf("report %s: %v (pid %d, mode %q)", b, err, rep.PID, rep.Mode)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout got %q with -o", stdout.String())
	}
}
