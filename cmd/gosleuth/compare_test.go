package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestCompareUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"compare"}, "takes two commands"},
		{"one command", []string{"compare", "true"}, "takes two commands"},
		{"three commands", []string{"compare", "a", "b", "c"}, "takes two commands"},
		{"one pid", []string{"compare", "--pid-a", "1"}, "go together"},
		{"pids and commands", []string{"compare", "--pid-a", "1", "--pid-b", "2", "true"}, "take no commands"},
		{"sweep without values", []string{"compare", "--sweep", "GOMAXPROCS", "true"}, "want NAME=v1,v2"},
		{"sweep one value", []string{"compare", "--sweep", "GOMAXPROCS=1", "true"}, "at least two values"},
		{"sweep two commands", []string{"compare", "--sweep", "P=1,2", "a", "b"}, "exactly one command"},
		{"one window", []string{"compare", "--windows", "1", "a", "b"}, "at least 2 a side"},
		{"short window", []string{"compare", "--window", "10ms", "a", "b"}, "at least 100ms"},
		{"load without rate", []string{"compare", "--load", "http://127.0.0.1:1/", "a", "b"}, "needs --rate"},
		{"rate without load", []string{"compare", "--rate", "100", "a", "b"}, "needs --load"},
		{"max rate", []string{"compare", "--load", "http://127.0.0.1:1/", "--rate", "max", "a", "b"}, "a fixed rate"},
		{"bad URL", []string{"compare", "--load", "ftp://x/", "--rate", "10", "a", "b"}, "scheme"},
		{"bad format", []string{"compare", "--format", "xml", "a", "b"}, "text, json, bench or html"},
		{"bad cpus", []string{"compare", "--cpus", "x", "a", "b"}, "CPU list"},
		{"bad syscalls", []string{"compare", "--syscalls", "maybe", "a", "b"}, "auto, on or off"},
		{"bad noise", []string{"compare", "--noise", "2", "a", "b"}, "--noise"},
		{"flag after commands", []string{"compare", "a", "b", "--bogus"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errb)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			if code := exitCode(err, &errb); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
		})
	}
}

func TestCompareRun(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "../../internal/compare/testdata/patient")
	dir := t.TempDir()
	out := filepath.Join(dir, "ab.json")
	args := []string{"compare", "--quiet", "--window", "300ms", "--windows", "6", "--warmup", "200ms", "--syscalls", "off",
		"--format", "json", "-o", out, "--fail-on-regression",
		bin + " -tick 5ms -spin 100us", bin + " -tick 5ms -spin 1ms"}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	var cf checkFailed
	if !errors.As(err, &cf) {
		t.Fatalf("err %v, want checkFailed (B does 10x the work)", err)
	}
	if code := exitCode(err, &stderr); code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	var res struct {
		Windows []struct {
			Side   int                `json:"side"`
			Values map[string]float64 `json:"values"`
		} `json:"windows"`
		Sentences []string `json:"sentences"`
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("bad JSON: %v", err)
	}
	if len(res.Windows) != 12 || len(res.Sentences) == 0 {
		t.Errorf("%d windows and sentences %q, want 12 and some", len(res.Windows), res.Sentences)
	}
}

// TestCompareFailureKeepsWindows: a side whose command exits mid-run (here
// when restarted for its second run of windows) fails with exit 1 in one
// line, and the JSON holds the windows so far.
func TestCompareFailureKeepsWindows(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "../../internal/compare/testdata/patient")
	out := filepath.Join(t.TempDir(), "ab.json")
	args := []string{"compare", "--quiet", "--window", "300ms", "--windows", "10", "--warmup", "200ms", "--syscalls", "off",
		"--format", "json", "-o", out, bin + " -tick 5ms",
		fmt.Sprintf("[ -e %[1]s ] && exit 1; touch %[1]s; exec sleep 100", filepath.Join(t.TempDir(), "started"))}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	if err == nil {
		t.Fatal("no error though B's command exited")
	}
	if code := exitCode(err, &stderr); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines != 0 || !strings.Contains(stderr.String(), "side B's command exited") {
		t.Errorf("stderr %q: want one line naming B's command", stderr.String())
	}
	var res struct {
		Windows []json.RawMessage `json:"windows"`
		Error   string            `json:"error"`
	}
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Windows) == 0 || res.Error == "" {
		t.Errorf("JSON after the failure: %d windows, error %q, %v", len(res.Windows), res.Error, err)
	}
}

// TestCompareHangup: a hangup (the terminal or the SSH session that ran
// compare closed) ends the run as SIGINT and SIGTERM do: the processes
// compare started are stopped, not left serving, and the windows so far
// are written.
func TestCompareHangup(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "../../internal/compare/testdata/patient")
	out := filepath.Join(t.TempDir(), "ab.json")
	// Under nohup the test would pass its ignored SIGHUP on to compare,
	// which then keeps ignoring it (as gosleuth run under nohup should).
	// A signal this process catches is reset to its default in a child.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOSLEUTH_CLI_ARGS="+strings.Join([]string{"compare", "--window", "1s", "--windows", "20",
		"--warmup", "200ms", "--syscalls", "off", "--format", "json", "-o", out, bin + " -tick 5ms", bin + " -tick 5ms"}, "\n"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The progress lines: the first window's says one was taken.
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var errText []string
	for taken := false; !taken; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("compare ended before its first window: %s", strings.Join(errText, "\n"))
			}
			errText = append(errText, l)
			taken = strings.HasPrefix(l, "window 1 ")
		case <-time.After(30 * time.Second):
			t.Fatalf("no window in 30 s: %s", strings.Join(errText, "\n"))
		}
	}
	// The shell compare started for the side now running, and its child
	// (between two windows one side's process is stopped before the
	// other's starts: look again until one is there).
	fs := proc.FS{}
	var started []int
	for end := time.Now().Add(10 * time.Second); len(started) == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		tids, _ := fs.TaskIDs(cmd.Process.Pid)
		for _, tid := range tids {
			for _, sh := range fs.Children(cmd.Process.Pid, tid) {
				started = append(started, sh)
				started = append(started, fs.Children(sh, sh)...)
			}
		}
	}
	if len(started) == 0 {
		t.Fatal("found no process compare started in 10 s")
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The rest of stderr is kept: if compare hangs, SIGQUIT makes its
	// runtime print every goroutine's stack there.
	var (
		mu   sync.Mutex
		rest []string
	)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for l := range lines {
			mu.Lock()
			rest = append(rest, l)
			mu.Unlock()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit %v, want status 1 (interrupted)", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("still running 30 s after SIGHUP; its stderr then, with its goroutines after SIGQUIT:\n%s", strings.Join(rest, "\n"))
	}
	// What compare started is gone (reaped by its shell, or by init once
	// the shell is).
	for _, pid := range started {
		for end := time.Now().Add(5 * time.Second); ; {
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				break
			}
			if time.Now().After(end) {
				t.Errorf("process %d (%s), started by compare, still there 5 s after compare exited", pid, fs.Comm(pid))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	var res struct {
		Windows []json.RawMessage `json:"windows"`
		Error   string            `json:"error"`
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no JSON after SIGHUP: %v", err)
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Windows) == 0 || !strings.Contains(res.Error, "interrupted") {
		t.Errorf("JSON after SIGHUP: %d windows, error %q, %v", len(res.Windows), res.Error, err)
	}
}
