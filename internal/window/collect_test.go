package window

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// burnLook stands for a close look whose instruments cost the target CPU:
// it makes the burner spin (half of every millisecond) while it runs, and
// for release after it returns, as a syscall counter's tracepoints cost
// the target until the kernel has released them (holdRelease).
type burnLook struct{ release time.Duration }

func (burnLook) Source() Source { return "burn" }

func (l burnLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return err
	}
	sleepCtx(ctx, d)
	done := holdRelease(ctx)
	go func() {
		defer done()
		time.Sleep(l.release)
		syscall.Kill(pid, syscall.SIGUSR2)
	}()
	return nil
}

// TestCollectQuietCPU: with QuietCPU, the window of a process looked at
// has the CPU it uses with nothing attached, not what the looks cost it,
// their release included, with --pid and on the whole host: a 1 ms ticker
// that spins half of every millisecond while a look runs and for 600 ms
// after is given its ticker's CPU (nearQuiet: the CPU measured before and
// after Collect, not the look's), a note gives both figures, and
// Window.QuietSec is the time measured. Without QuietCPU the window's CPU
// is the looks' too.
func TestCollectQuietCPU(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/burner")
	p := testbin.Start(t, exec.Command(bin), testbin.Options{})
	pid := p.PID()
	r, err := proc.NewReader(proc.Options{PIDs: []int{pid}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var snap proc.Snapshot
	cpu := func() float64 { // seconds run by the burner's threads (schedstat)
		if err := r.Snapshot(&snap); err != nil || snap.Find(int32(pid)) == nil {
			t.Fatalf("read the burner: %v", err)
		}
		return float64(snap.Find(int32(pid)).RunMerged) / 1e9
	}
	quiet := func() float64 { // cores over a second, nothing attached
		a, t0 := cpu(), time.Now()
		time.Sleep(time.Second)
		return (cpu() - a) / time.Since(t0).Seconds()
	}
	pickBurner := func(ws []*Window, _ *Host, _ int) []*Window {
		for _, w := range ws {
			if w.PID == pid {
				return []*Window{w}
			}
		}
		return nil
	}
	for _, tc := range []struct {
		name  string
		cfg   CollectConfig
		quiet bool
	}{
		{"pid", CollectConfig{PIDs: []int{pid}, Duration: 4 * time.Second, QuietCPU: true}, true},
		{"whole host", CollectConfig{Duration: 5 * time.Second, Triage: pickBurner, QuietCPU: true}, true},
		{"pid without QuietCPU", CollectConfig{PIDs: []int{pid}, Duration: 4 * time.Second}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Looks = []Look{burnLook{release: 600 * time.Millisecond}}
			before := quiet()
			a, t0 := cpu(), time.Now()
			ws, _, notes, err := Collect(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			during := (cpu() - a) / time.Since(t0).Seconds()
			time.Sleep(time.Second) // the release's last spin
			after := quiet()
			var w *Window
			for _, x := range ws {
				if x.PID == pid {
					w = x
				}
			}
			if w == nil {
				t.Fatalf("no window of pid %d", pid)
			}
			ref := (before + after) / 2
			t.Logf("burner %.3f and %.3f cores with nothing attached, %.3f over Collect; the window says %.3f over %.1f s, measured over %.1f s; notes %q",
				before, after, during, w.Cores(), w.Seconds(), w.QuietSec, notes)
			if during < ref+0.05 {
				t.Fatalf("the look's spin did not raise the burner's CPU by 0.05 core (%.3f against %.3f): nothing to correct", during, ref)
			}
			note := fmt.Sprintf("CPU of pid %d: ", pid)
			hasNote := strings.Contains(strings.Join(notes, "\n"), note)
			if !tc.quiet {
				if w.QuietSec != 0 || hasNote || w.Cores() < ref+0.05 {
					t.Errorf("without QuietCPU: %.3f cores (quiet %.1f s, note %v), want the looks' cost in it", w.Cores(), w.QuietSec, hasNote)
				}
				return
			}
			if got := w.Cores(); !nearQuiet(got, ref, during) {
				t.Errorf("the window says %.3f cores, the burner uses %.3f with nothing attached (%.3f with the look)", got, ref, during)
			}
			if min := cfg.Duration / 4; w.QuietSec < min.Seconds() {
				t.Errorf("CPU measured over %.2f s with nothing attached, want both stretches (%v at least)", w.QuietSec, min)
			}
			if !hasNote || !strings.Contains(strings.Join(notes, "\n"), "and the last") {
				t.Errorf("no note gives the CPU of both stretches: %q", notes)
			}
		})
	}
}

// nearQuiet reports whether got, a process's CPU in cores as a window
// gives it, is the CPU the process uses with nothing attached (quiet,
// measured around the run) rather than over the run with the looks on
// (looked): within a third of the way from quiet to looked, and above
// quiet/2.5 (the ticker's own drift on a busy host).
func nearQuiet(got, quiet, looked float64) bool {
	return got <= quiet+(looked-quiet)/3 && got >= quiet/2.5
}
