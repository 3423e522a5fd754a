//go:build linux

package gomem

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestMemProfilingOff: in a binary that references nothing of the heap
// profile the linker turned memory profiling off; the reader says so in
// one line, with why, and reads nothing. The census patient, which links
// net/http/pprof, keeps it on.
func TestMemProfilingOff(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	cmd := exec.Command(testbin.Build(t, "./testdata/noprof"))
	testbin.Start(t, cmd, testbin.Options{})
	p, err := Open(proc.FS{}, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if off, err := p.MemProfilingOff(); err != nil || !off {
		t.Errorf("memory profiling off: %v, %v; want true", off, err)
	}
	_, err = p.HeapProfile()
	if !errors.Is(err, ErrMemProfilingOff) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "linker") {
		t.Errorf("heap profile of a binary without memory profiling: %v", err)
	}
	pid, _ := censusPatient(t)
	q, err := Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	if off, err := q.MemProfilingOff(); err != nil || off {
		t.Errorf("the census patient (net/http/pprof): memory profiling off %v, %v; want false", off, err)
	}
}
