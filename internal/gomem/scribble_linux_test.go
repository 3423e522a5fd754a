//go:build linux

package gomem

import (
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestScribbler reads, for five seconds, a process that overwrites its own
// runtime's books with garbage, looping lists and huge counts while it is
// read: every read ends in bounded time with a result or an error, and
// gosleuth's own heap stays bounded.
func TestScribbler(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	bin := testbin.BuildWith(t, "./testdata/scribbler", "-ldflags=-checklinkname=0")
	cmd := exec.Command(bin)
	if p := testbin.Start(t, cmd, testbin.Options{}); p.Ready() != "ready" {
		t.Fatalf("scribbler did not start: %q", p.Ready())
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var peak uint64
	reads, errs := 0, 0
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		p, err := Open(proc.FS{}, cmd.Process.Pid)
		if err != nil {
			t.Fatalf("open the scribbler (its executable is sound): %v", err)
		}
		for range 5 {
			start := time.Now()
			_, err1 := p.Census(CensusOptions{})
			_, err2 := p.Stats()
			_, err3 := p.HeapProfile()
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("one read of the scribbled books took %v", d)
			}
			reads++
			for _, e := range []error{err1, err2, err3} {
				if e != nil {
					errs++
				}
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	if cmd.ProcessState != nil {
		t.Fatalf("the scribbler exited while read: %v", cmd.ProcessState)
	}
	t.Logf("%d reads of census, statistics and heap profile, %d errors; heap %d MB before, peak %d MB",
		reads, errs, before.HeapAlloc>>20, peak>>20)
	// A census keeps at most the unwind bound's records and 10,000
	// groups; the allgs array read is at most 8 bytes per goroutine of a
	// readable array.
	if peak > before.HeapAlloc+512<<20 {
		t.Errorf("gosleuth's heap grew to %d MB reading the scribbler", peak>>20)
	}
	if reads < 10 {
		t.Errorf("only %d reads in 5 s", reads)
	}
}
