package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/gosleuth/gosleuth/agent"
	"github.com/gosleuth/gosleuth/internal/goruntime"
)

func TestListenInProcess(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	a, err := agent.Listen(agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := agent.Listen(agent.Options{}); err == nil {
		t.Fatal("second Listen in one process succeeded")
	}
	fi, err := os.Stat(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(a.Path()))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", di.Mode().Perm())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, notes, err := goruntime.Connect(ctx, os.Getpid(), goruntime.Options{})
	if err != nil {
		t.Fatalf("connect: %v (notes %q)", err, notes)
	}
	defer src.Close()
	if src.Kind() != "agent" || src.Addr() != a.Path() {
		t.Errorf("source %s at %s, want agent at %s", src.Kind(), src.Addr(), a.Path())
	}
	runtime.GC()
	s1, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/gomaxprocs:threads"}}
	metrics.Read(own)
	if s1.GCCycles != own[0].Value.Uint64() || s1.GOMAXPROCS != own[1].Value.Uint64() {
		t.Errorf("agent says %d cycles, GOMAXPROCS %d; runtime %d, %d", s1.GCCycles, s1.GOMAXPROCS,
			own[0].Value.Uint64(), own[1].Value.Uint64())
	}
	if len(s1.Raw) != len(metrics.All()) {
		t.Errorf("agent served %d metrics, catalog has %d", len(s1.Raw), len(metrics.All()))
	}
	d, err := src.Goroutines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Total < 2 || len(d.Groups) == 0 {
		t.Errorf("goroutine dump: %d goroutines in %d groups", d.Total, len(d.Groups))
	}
	a.Close()
	if _, err := os.Stat(a.Path()); !os.IsNotExist(err) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// TestFlightRecorder: a snapshot on request when enabled, a clear refusal
// when not.
func TestFlightRecorder(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, enabled := range []bool{false, true} {
		a, err := agent.Listen(agent.Options{FlightRecorder: enabled})
		if err != nil {
			t.Fatal(err)
		}
		src, _, err := goruntime.Connect(ctx, os.Getpid(), goruntime.Options{})
		if err != nil {
			a.Close()
			t.Fatal(err)
		}
		// Give the tracer something to record.
		done := make(chan bool)
		for range 4 {
			go func() { time.Sleep(time.Millisecond); done <- true }()
		}
		for range 4 {
			<-done
		}
		b, err := src.(goruntime.FlightRecorder).FlightRecording(ctx)
		src.Close()
		a.Close()
		switch {
		case enabled && (err != nil || !strings.HasPrefix(string(b), "go 1.") || len(b) < 1000):
			t.Errorf("enabled: %d bytes %q..., err %v", len(b), b[:min(len(b), 16)], err)
		case !enabled && (err == nil || !strings.Contains(err.Error(), "not enabled")):
			t.Errorf("disabled: err %v", err)
		}
	}
}

// TestSweepStale: Listen removes sockets nobody listens on and keeps live
// ones and other files.
func TestSweepStale(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "999999999.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	live := filepath.Join(dir, "999999998.sock")
	ln2, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, nil, 0o600)
	a, err := agent.Listen(agent.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale socket kept: %v", err)
	}
	for _, p := range []string{live, other, a.Path()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}
