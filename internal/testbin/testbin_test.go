package testbin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBuildOnceAndCleanup(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(src); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	a := Build(t, ".")
	b := Build(t, ".")
	if a != b {
		t.Fatalf("built twice: %s and %s", a, b)
	}
	if out, err := exec.Command(a).CombinedOutput(); err != nil || string(out) != "hi\n" {
		t.Fatalf("run: %v %q", err, out)
	}
	fi, err := os.Stat(filepath.Dir(a))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("directory %v mode %v, want 0755", err, fi.Mode().Perm())
	}
	Cleanup()
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("after Cleanup: %v", err)
	}
}

// TestStart runs a shell program that prints an address, says it is
// ready, answers SIGUSR1 with a line and leaves on SIGTERM: Start returns
// once it is ready with the lines so far, Ask gets its answer, and the
// program is gone when the test's cleanups have run.
func TestStart(t *testing.T) {
	const script = `trap 'echo report; ' USR1; trap 'echo "self {\"n\": 7}"' USR2; trap 'exit 0' TERM; echo addr 127.0.0.1:1; echo ready; while :; do sleep 0.05; done`
	var pid int
	t.Run("run", func(t *testing.T) {
		p := Start(t, exec.Command("/bin/sh", "-c", script), Options{
			Ready: func(l string) bool { return l == "ready" }, Lines: true, Stop: syscall.SIGTERM})
		pid = p.PID()
		if len(p.Head) != 2 || p.Head[0] != "addr 127.0.0.1:1" || p.Ready() != "ready" {
			t.Fatalf("head %q", p.Head)
		}
		if l := p.Ask(t, syscall.SIGUSR1, 10*time.Second); l != "report" {
			t.Errorf("answer %q, want report", l)
		}
		var v struct{ N int }
		if p.AskJSON(t, syscall.SIGUSR2, "self ", &v, 10*time.Second); v.N != 7 {
			t.Errorf("JSON answer %+v, want n 7", v)
		}
	})
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("program %d still there after the test (%v)", pid, err)
	}
	// A program that logs on its standard error.
	t.Run("stderr", func(t *testing.T) {
		p := Start(t, exec.Command("/bin/sh", "-c", "echo out; echo starting >&2; echo Listening on :1 >&2; sleep 60"),
			Options{Stderr: true, Ready: func(l string) bool { return strings.HasPrefix(l, "Listening on") }})
		if len(p.Head) != 2 || p.Head[0] != "starting" {
			t.Errorf("head %q, want the two lines of its standard error", p.Head)
		}
	})
	// The first line is ready by default; the rest is dropped.
	t.Run("first line", func(t *testing.T) {
		p := Start(t, exec.Command("/bin/sh", "-c", "echo 4242; yes | head -c 1000000; sleep 60"), Options{})
		if p.Ready() != "4242" {
			t.Errorf("ready line %q", p.Ready())
		}
	})
}

// TestStartFailure: a program that ends before it is ready fails the test
// that started it, saying what it printed.
func TestStartFailure(t *testing.T) {
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(ft, exec.Command("/bin/sh", "-c", "echo starting"), Options{Ready: func(l string) bool { return l == "ready" }, Wait: 10 * time.Second})
	}()
	<-done
	if !strings.Contains(ft.msg, "ended before it was ready") || !strings.Contains(ft.msg, "starting") {
		t.Errorf("failure %q", ft.msg)
	}
	for _, f := range ft.cleanups {
		f()
	}
}

// fakeT records a fatal failure instead of failing the real test.
type fakeT struct {
	testing.TB
	msg      string
	cleanups []func()
}

func (f *fakeT) Helper()           {}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestFetch: the body of a 200 reply; any other status fails the test.
func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ok" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "body")
	}))
	defer srv.Close()
	if b := Fetch(t, srv.URL+"/ok"); string(b) != "body" {
		t.Errorf("body %q", b)
	}
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Fetch(ft, srv.URL+"/missing") }()
	<-done
	if !strings.Contains(ft.msg, "404") {
		t.Errorf("failure %q, want the status", ft.msg)
	}
}
