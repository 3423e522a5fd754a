package syscalls

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestCountExact counts a patient's getppid calls (4 threads x 50,000, some
// started after attach) with each mechanism: the count by name is exact,
// every name asked for is in the reading, and the total holds the named
// calls and more.
func TestCountExact(t *testing.T) {
	needPerf(t)
	for _, tc := range []struct {
		name string
		mech Mechanism
	}{
		{"tracepoints", Tracepoints},
		{"bpf", BPF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mech == BPF {
				testenv.Require(t, testenv.BPF)
			}
			p := startPatient(t, "-threads", "4", "-calls", "50000", "-late")
			e, err := CountExact(p.PID(), ExactOptions{Names: []string{"getppid", "futex"}, Mechanism: tc.mech, Total: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if e.Mechanism() != tc.mech {
				t.Errorf("mechanism %v, want %v (%s)", e.Mechanism(), tc.mech, e.Describe())
			}
			io.WriteString(p.in, "go\n")
			p.expect(t, "done")
			r, err := e.Read()
			if err != nil {
				t.Fatal(err)
			}
			if r.ByName["getppid"] != 200000 {
				t.Errorf("getppid counted %d times, want 200000 (%v)", r.ByName["getppid"], r.ByName)
			}
			if _, ok := r.ByName["futex"]; !ok || len(r.ByName) != 2 {
				t.Errorf("reading %v: want getppid and futex, 0 when not called", r.ByName)
			}
			if r.Total < 200000+r.ByName["futex"] {
				t.Errorf("total %d below the named calls %v", r.Total, r.ByName)
			}
		})
	}
}

// TestCountExactFS: the per-task counters list the target's threads through
// the FS they are given (the --proc mount), not /proc: a mount without the
// process does not find it, one that links to the real one counts.
func TestCountExactFS(t *testing.T) {
	needPerf(t)
	p := startPatient(t, "-threads", "2", "-calls", "1000")
	pid := p.PID()
	empty := t.TempDir()
	if _, err := CountExact(pid, ExactOptions{FS: proc.NewFS(empty)}); !errors.Is(err, unix.ESRCH) {
		t.Errorf("counting through an empty proc mount: %v, want the process not found there", err)
	}
	mount := t.TempDir()
	if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(pid)), filepath.Join(mount, strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
	e, err := CountExact(pid, ExactOptions{FS: proc.NewFS(mount), Names: []string{"getppid"}})
	if err != nil {
		t.Fatalf("counting through a mount that holds the process: %v", err)
	}
	defer e.Close()
	io.WriteString(p.in, "go\n")
	p.expect(t, "done")
	if r, err := e.Read(); err != nil || r.ByName["getppid"] != 2000 {
		t.Errorf("getppid %v (%v), want 2000", r.ByName, err)
	}
}
