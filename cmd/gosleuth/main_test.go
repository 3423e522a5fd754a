package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// TestMain lets a test run the CLI in a child process (for example as
// another user): GOSLEUTH_CLI_ARGS holds the arguments, one per line.
func TestMain(m *testing.M) {
	if args := os.Getenv("GOSLEUTH_CLI_ARGS"); args != "" {
		os.Exit(mainExit(strings.Split(args, "\n")))
	}
	testbin.Main(m)
}

func TestRunCommands(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string // substring
		errWords string // substring of the error
	}{
		{"no command", nil, 2, "", "no command given"},
		{"help", []string{"help"}, 0, "Commands:", ""},
		{"help top", []string{"help", "top"}, 0, "--interval", ""},
		{"help unknown", []string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"version", []string{"version"}, 0, "gosleuth ", ""},
		{"version with args", []string{"version", "x"}, 2, "", "no arguments"},
		{"--version", []string{"--version"}, 0, "gosleuth ", ""},
		{"-v", []string{"-v"}, 0, "gosleuth ", ""},
		{"top bad flag", []string{"top", "--bogus"}, 2, "", "flag provided but not defined"},
		{"top bad interval", []string{"top", "--interval", "1ms"}, 2, "", "at least 100ms"},
		{"top malformed interval", []string{"top", "--interval", "soon"}, 2, "", "invalid value"},
		{"top bad format", []string{"top", "--format", "xml"}, 2, "", "text or json"},
		{"top bad sort", []string{"top", "--sort", "size"}, 2, "", "unknown sort column"},
		{"top bad pid", []string{"top", "--pid", "abc"}, 2, "", `invalid pid "abc"`},
		{"top negative pid", []string{"top", "--pid", "-5"}, 2, "", `invalid pid "-5"`},
		{"top stray argument", []string{"top", "1234"}, 2, "", "takes no arguments"},
		{"duration without its unit", []string{"top", "--interval", "5"}, 2, "", "a duration needs its unit (5s, 5ms, 5m)"},
		{"duration malformed", []string{"doctor", "--duration", "soon"}, 2, "", "want a duration such as 500ms, 10s or 2m"},
		{"pids to one pid", []string{"inspect", "--pid", "1,2"}, 2, "", "--pid takes one PID"},
		{"noise as a percentage", []string{"compare", "--noise", "2%"}, 2, "", "compare takes two commands"},
		{"noise malformed", []string{"compare", "--noise", "2x"}, 2, "", "want a fraction such as 0.02 or a percentage such as 2%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errb)
			code := 0
			var u usageError
			switch {
			case err == nil:
			case errors.As(err, &u):
				code = 2
			default:
				code = 1
			}
			if code != tt.code {
				t.Fatalf("exit code %d, want %d (err %v)", code, tt.code, err)
			}
			if !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("stdout %q lacks %q", out.String(), tt.stdout)
			}
			if tt.errWords != "" && (err == nil || !strings.Contains(err.Error(), tt.errWords)) {
				t.Errorf("error %v lacks %q", err, tt.errWords)
			}
		})
	}
}

// runChild runs the CLI in a child process and returns stdout, stderr and
// the exit code; cred, when set, runs it as that user.
func runChild(t *testing.T, bin string, cred *syscall.Credential, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = childEnv(args)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// childEnv is the environment of a CLI child running args: this test
// binary's, without the race detector's sleep at exit (its
// atexit_sleep_ms, 1 s by default, would add a second to every child).
func childEnv(args []string, extra ...string) []string {
	return append(os.Environ(), append([]string{"GOSLEUTH_CLI_ARGS=" + strings.Join(args, "\n"),
		"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}, extra...)...)
}

func TestTopNotFound(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	_, stderr, code := runChild(t, os.Args[0], nil, "top", "--pid", "536870000", "--once")
	if code != 1 || stderr != "gosleuth: process 536870000 not found\n" {
		t.Errorf("code %d stderr %q", code, stderr)
	}
}

// TestTopUnprivileged runs top as user nobody: other users' descriptor
// counts and executables are unreadable, shown as null with a note, and
// nothing fails.
func TestTopUnprivileged(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Nobody)
	bin := nobodyBinary(t)
	stdout, stderr, code := runChild(t, bin, nobody,
		"top", "--once", "--format", "json", "--interval", "200ms")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rec struct {
		Note      string `json:"note"`
		Processes []struct {
			PID  int    `json:"pid"`
			User string `json:"user"`
			FDs  *int   `json:"fds"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(stdout), &rec); err != nil {
		t.Fatalf("output is not one JSON record: %v\n%s", err, stdout)
	}
	if rec.Note == "" {
		t.Errorf("no permission note")
	}
	var nullFDs, ownFDs int
	for _, p := range rec.Processes {
		if p.FDs == nil && p.User == "root" {
			nullFDs++
		}
		if p.FDs != nil && p.User == "nobody" {
			ownFDs++
		}
	}
	if nullFDs == 0 || ownFDs == 0 {
		t.Errorf("root processes with null fds: %d, nobody's with fds: %d", nullFDs, ownFDs)
	}
}

// nobody is the user the unprivileged tests run the CLI as.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// nobodyBinary copies this test binary into a fresh directory every user
// can read and returns its path, so runChild can run the CLI as nobody.
// The caller must be root (to switch user).
func nobodyBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gosleuth-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gosleuth.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestBadFlagOneLine checks a bad flag value is reported once, in one line,
// with a pointer to the command's help, and exit status 2.
func TestBadFlagOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"profile", "--duration", "soon"},
		{"doctor", "--pid", "abc"},
		{"load", "--no-such-flag"},
		{"doctor", "--fail-on", "sometimes"},
	} {
		var stdout, stderr bytes.Buffer
		code := exitCode(run(context.Background(), args, &stdout, &stderr), &stderr)
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 2 || !strings.HasPrefix(lines[0], "gosleuth: ") ||
			lines[1] != "run 'gosleuth help "+args[0]+"' for its flags" {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, stderr.String())
		}
	}
}

// TestOneMessagePerCondition runs every command against a PID that does
// not exist, a kernel thread and a zombie: each condition gets one line,
// the same from every command, and exit status 1.
func TestOneMessagePerCondition(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	time.Sleep(200 * time.Millisecond) // exited, not reaped: a zombie
	zombie := strconv.Itoa(z.Process.Pid)
	for _, tc := range []struct{ pid, want string }{
		{"999999", "gosleuth: process 999999 not found\n"},
		{"2", "gosleuth: process 2 is a kernel thread: it has no user space, executable or Go runtime to observe\n"},
		{zombie, "gosleuth: process " + zombie + " is a zombie (exited, not yet reaped by its parent): nothing left to observe\n"},
	} {
		for _, args := range [][]string{
			{"top", "--pid", tc.pid, "--once"},
			{"doctor", "--pid", tc.pid, "--duration", "2s"},
			{"syscalls", "--pid", tc.pid, "--duration", "1s"},
			{"profile", "--pid", tc.pid, "--duration", "1s", "-o", filepath.Join(t.TempDir(), "p.pb.gz")},
			{"inspect", "--pid", tc.pid, "--duration", "1s"},
			{"load", "http://127.0.0.1:1/", "--rate", "1", "--duration", "1s", "--watch", tc.pid},
		} {
			var stdout, stderr bytes.Buffer
			code := exitCode(run(context.Background(), args, &stdout, &stderr), &stderr)
			if code != 1 || stderr.String() != tc.want {
				t.Errorf("%s --pid %s: exit %d, stderr %q, want %q", args[0], tc.pid, code, stderr.String(), tc.want)
			}
		}
	}
}

// TestHelpUnknownOneLine: "help nosuch" is one line pointing to the list,
// not a second line pointing to "gosleuth help help".
func TestHelpUnknownOneLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := exitCode(run(context.Background(), []string{"help", "nosuch"}, &stdout, &stderr), &stderr)
	if want := "gosleuth: unknown command \"nosuch\": run 'gosleuth help' for the list\n"; code != 2 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q, want %q", code, stderr.String(), want)
	}
}

// kernelFDs counts the perf_event and BPF descriptors pid holds.
func kernelFDs(pid int) (perfN, bpfN int) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		switch l, _ := os.Readlink(filepath.Join(dir, e.Name())); {
		case l == "anon_inode:[perf_event]":
			perfN++
		case strings.HasPrefix(l, "anon_inode:bpf"):
			bpfN++
		}
	}
	return perfN, bpfN
}

// procState is the state letter of pid, "" when it is gone.
func procState(pid int) string {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return ""
	}
	fs := strings.Fields(string(st[i+1:]))
	if len(fs) == 0 {
		return ""
	}
	return fs[0]
}
