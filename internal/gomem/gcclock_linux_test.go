//go:build linux

package gomem

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// gcPatient runs testdata/gcclock built with flags and returns its stdin
// and the program, whose answers are its later lines.
func gcPatient(t *testing.T, flags ...string) (io.Writer, *testbin.Proc) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	cmd := exec.Command(testbin.BuildWith(t, "./testdata/gcclock", flags...))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, cmd, testbin.Options{Lines: true})
	if p.Ready() != "ready" {
		t.Fatalf("patient did not start: %q", p.Ready())
	}
	return in, p
}

// openClock opens process pid and its GC clock.
func openClock(t testing.TB, pid int) (*Process, *GCClockReader) {
	t.Helper()
	p, err := Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.NewGCClock()
	if err != nil {
		t.Fatal(err)
	}
	return p, r
}

// TestGCClock: after each cycle the program runs, the clock read from its
// memory says what the program says of it: the cycle count, a start and
// an end within the moments the program took just before and after the
// cycle, no cycle under way, and the ring's last end time and pause equal
// to runtime/debug's; with a symbol table, and stripped (the variables
// found from the runtime's code).
func TestGCClock(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
	}{{"symbols", nil}, {"stripped", []string{"-ldflags=-s -w"}}} {
		t.Run(c.name, func(t *testing.T) { testGCClock(t, c.flags) })
	}
}

func testGCClock(t *testing.T, flags []string) {
	in, patient := gcPatient(t, flags...)
	p, r := openClock(t, patient.PID())
	if !r.HasCPU() {
		t.Errorf("no GC CPU in %s's layout", p.GoVersion)
	}
	var prev GCClock
	for i := range 3 {
		fmt.Fprintln(in, "gc")
		answer := patient.Next(t, 30*time.Second)
		var t0, t1, pauseEnd, pause int64
		var numgc uint32
		if _, err := fmt.Sscan(answer, &t0, &t1, &numgc, &pauseEnd, &pause); err != nil {
			t.Fatalf("patient's answer %q: %v", answer, err)
		}
		c, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if c.Cycles != numgc || c.Started != numgc {
			t.Errorf("cycle %d: read %d completed and %d started, the program counts %d", i, c.Cycles, c.Started, numgc)
		}
		if c.InCycle() || c.Start < t0 || c.End > t1 || c.End <= c.Start {
			t.Errorf("cycle %d: read %d..%d (under way: %v), the program ran it within %d..%d", i, c.Start, c.End, c.InCycle(), t0, t1)
		}
		if c.Now < t1 {
			t.Errorf("clock read at %d, before the program's %d", c.Now, t1)
		}
		if i > 0 && (c.GCTotal <= prev.GCTotal || c.Assist < prev.Assist || c.Assist > c.GCTotal) {
			t.Errorf("GC CPU: assist %v of %v after a cycle, %v of %v before", c.Assist, c.GCTotal, prev.Assist, prev.GCTotal)
		}
		prev = c
		ends, err := r.Ends(c.Cycles-3, c.Cycles)
		if err != nil {
			t.Fatal(err)
		}
		if len(ends) == 0 {
			t.Fatalf("cycle %d: no end in the ring", i)
		}
		last := ends[len(ends)-1]
		if last.N != c.Cycles-1 || last.End.UnixNano() != pauseEnd || int64(last.Pause) != pause {
			t.Errorf("cycle %d: ring's last %+v, the program's end %d pause %d", i, last, pauseEnd, pause)
		}
	}
}

// TestGCClockUnderWay: in a program running long cycles back to back, the
// clock catches cycles under way, and every completed cycle it reads ends
// after it started and before the read.
func TestGCClockUnderWay(t *testing.T) {
	in, patient := gcPatient(t)
	fmt.Fprintln(in, "busy")
	patient.Next(t, 30*time.Second)
	_, r := openClock(t, patient.PID())
	under, done := 0, 0
	var first GCClock
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && (under < 5 || done < 5); {
		c, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		if first.Now == 0 {
			first = c
		}
		if c.InCycle() {
			under++
			if c.Start > c.Now {
				t.Fatalf("cycle under way from %d, after the read at %d", c.Start, c.Now)
			}
		} else if c.End > 0 {
			done++
			if c.End > c.Now || c.Start > c.End {
				t.Fatalf("completed cycle %d..%d read at %d", c.Start, c.End, c.Now)
			}
		}
		time.Sleep(time.Millisecond)
	}
	if under == 0 || done == 0 {
		t.Errorf("%d readings under way, %d between cycles: want both in a program collecting back to back", under, done)
	}
	last, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if last.Cycles <= first.Cycles {
		t.Errorf("no cycle completed in 5 s of back-to-back collection (%d, then %d)", first.Cycles, last.Cycles)
	}
}

// BenchmarkGCClockRead is the cost in gosleuth of one reading of the GC
// clock (the test process reads itself).
func BenchmarkGCClockRead(b *testing.B) {
	testenv.Require(b, testenv.Linux, testenv.AMD64)
	_, r := openClock(b, os.Getpid())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
