//go:build linux

package syscalls

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRunFallsBackToTotals lowers RLIMIT_NOFILE below one descriptor per
// syscall tracepoint: Run must count the exact total with one counter per
// thread and say why.
func TestRunFallsBackToTotals(t *testing.T) {
	needPerf(t)
	p := startPatient(t, "-threads", "2", "-calls", "1000")
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: 256, Max: 256}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatalf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	var out, errb bytes.Buffer
	// The patient works once counting has started and well before the
	// window ends.
	go func() {
		time.Sleep(500 * time.Millisecond)
		io.WriteString(p.in, "go\n")
	}()
	cfg := Config{PID: p.cmd.Process.Pid, Duration: 3 * time.Second, JSON: true}
	if err := Run(context.Background(), cfg, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rep.Mode != ModeTotals || len(rep.Notes) == 0 || rep.Total < 2000 {
		t.Errorf("mode %q, total %d, notes %q: want %s, >= 2000 calls and a note", rep.Mode, rep.Total, rep.Notes, ModeTotals)
	}
}
