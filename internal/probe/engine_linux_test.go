package probe

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

type patient struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// startPatient builds the patient (stripped unless flags say otherwise)
// and runs it in mode.
func startPatient(t *testing.T, buildFlags []string, args ...string) *patient {
	t.Helper()
	return startCmd(t, exec.Command(testbin.BuildWith(t, "./testdata/patient", buildFlags...), args...))
}

// startCmd starts a patient's command (the patient itself, or a command
// that runs it) and waits for it to be ready.
func startCmd(t *testing.T, cmd *exec.Cmd) *patient {
	t.Helper()
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &patient{cmd: cmd, in: in, lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	if l := <-p.lines; l != "ready" {
		t.Fatalf("patient said %q", l)
	}
	return p
}

// countCalls probes main.hit of process pid of fs with attach, tells the
// patients to make their calls once attached, and returns what was
// counted once each has said done. The window ends then (at most a minute
// on a saturated host): counts are asserted exact, so no call may fall
// after it.
func countCalls(t *testing.T, fs proc.FS, pid int, attach string, patients []*patient, done string) *Result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	said := make(chan string, len(patients))
	r, err := Run(ctx, fs, pid, []Probe{{Func: "main.hit", Stacks: true, Arg: RAX}},
		Options{Duration: time.Minute, Budget: -1, Attach: attach, Attached: func() {
			for _, q := range patients {
				io.WriteString(q.in, "go\n")
			}
			go func() {
				for _, q := range patients {
					said <- <-q.lines
				}
				cancel()
			}()
		}})
	if err != nil {
		t.Fatal(err)
	}
	for range patients {
		if l := <-said; l != done {
			t.Fatalf("patient: %q, want %q", l, done)
		}
	}
	return r
}

func needProbes(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF, testenv.Uprobes)
}

func find(t *testing.T, r *Result, fn string) FuncStat {
	t.Helper()
	for _, f := range r.Funcs {
		if f.Func == fn {
			return f
		}
	}
	t.Fatalf("no result for %s: %+v", fn, r.Funcs)
	return FuncStat{}
}

// TestExactCounts: a function called 50,000 times in each of four threads,
// two of them created after the probe attached, is counted exactly on
// stripped, PIE and plain builds, and its caller is named with its file
// and line although the binary has no symbol table.
func TestExactCounts(t *testing.T) {
	needProbes(t)
	for _, b := range []struct {
		name   string
		flags  []string
		attach string
	}{
		{"stripped", []string{"-ldflags=-s -w"}, AttachAuto},
		{"pie", []string{"-buildmode=pie", "-ldflags=-s -w"}, AttachAuto},
		{"plain", nil, AttachAuto},
		// The fallback for kernels without uprobe_multi links, forced
		// here: one perf event per function covers every process of the
		// binary, so a second instance making the same calls at the same
		// time must not be counted.
		{"stripped perf events", []string{"-ldflags=-s -w"}, AttachPerf},
		{"pie perf events", []string{"-buildmode=pie", "-ldflags=-s -w"}, AttachPerf},
		// Without BPF: a tracefs uprobe and per-CPU sampling events,
		// also for every process of the binary.
		{"stripped tracefs", []string{"-ldflags=-s -w"}, AttachTracefs},
	} {
		t.Run(b.name, func(t *testing.T) {
			p := startPatient(t, b.flags, "-mode", "count", "-n", "50000")
			var other *patient
			if b.attach != AttachAuto {
				other = startPatient(t, b.flags, "-mode", "count", "-n", "50000")
			}
			patients := []*patient{p}
			if other != nil {
				patients = append(patients, other)
			}
			r := countCalls(t, proc.NewFS(""), p.cmd.Process.Pid, b.attach, patients, "done 200000")
			wantMech := map[string]string{AttachAuto: mechMulti, AttachPerf: mechPerf, AttachTracefs: mechTracefs}[b.attach]
			if r.Mechanism != wantMech {
				t.Errorf("mechanism %q, want %q", r.Mechanism, wantMech)
			}
			f := find(t, r, "main.hit")
			t.Logf("%s: %d calls, kind %s, attach %.1f ms, detach %.1f ms, callers %+v", b.name, f.Count, f.Kind, r.AttachMS, r.DetachMS, f.Callers)
			if f.Count != 200000 {
				t.Errorf("counted %d calls, the patient made 200000 (notes %q)", f.Count, r.Notes)
			}
			if f.Kind != Emulated.String() {
				t.Errorf("probe point %s, want the emulated PUSHQ BP", f.Kind)
			}
			if b.attach == AttachTracefs {
				// Calls only: no callers or arguments without BPF.
				if len(f.Callers) != 0 || len(f.Args) != 0 {
					t.Errorf("tracefs counted callers %v or arguments %v it cannot read", f.Callers, f.Args)
				}
				return
			}
			if len(f.Callers) == 0 || f.Callers[0].Func != "main.worker" || !strings.HasSuffix(f.Callers[0].File, "patient/main.go") || f.Callers[0].Line == 0 {
				t.Errorf("callers %+v: want main.worker at patient/main.go:LINE", f.Callers)
			}
			if len(f.Args) == 0 {
				t.Errorf("no argument values read")
			}
		})
	}
}

// TestSleepArgument: time.Sleep's duration is read from AX (1 ms in every
// call) and its caller is the loop that sleeps.
func TestSleepArgument(t *testing.T) {
	needProbes(t)
	p := startPatient(t, []string{"-ldflags=-s -w"}, "-mode", "sleep")
	r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid,
		[]Probe{{Func: "time.Sleep", Stacks: true, Arg: RAX}}, Options{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := find(t, r, "time.Sleep")
	t.Logf("time.Sleep %.0f/s, args %+v, callers %+v, cost %.3f%% of a CPU", f.PerSec, f.Args, f.Callers, 100*r.CostCPU)
	if f.PerSec < 200 || f.PerSec > 1100 {
		t.Errorf("time.Sleep at %.0f/s from a 1 ms sleep loop", f.PerSec)
	}
	if len(f.Args) == 0 || f.Args[0].Value != uint64(time.Millisecond) || f.Args[0].Share < 0.99 {
		t.Errorf("args %+v: want 1000000 (1 ms) in every call", f.Args)
	}
	if len(f.Callers) == 0 || f.Callers[0].Func != "main.poll" {
		t.Errorf("callers %+v: want main.poll", f.Callers)
	}
}

// TestGovernorHotFunction: a function called about a million times a
// second would cost the target a whole CPU probed throughout. In a 4 s
// window the 1% budget still pays for a few 5 ms bursts (up to 3.6
// million calls a second): it is sampled, and the probes' cost stays near
// the budget. In a 200 ms one it pays for less than two (from 200,000
// calls a second): it is too hot to probe, even in bursts.
func TestGovernorHotFunction(t *testing.T) {
	needProbes(t)
	p := startPatient(t, []string{"-ldflags=-s -w"}, "-mode", "hot")
	for _, tt := range []struct {
		window  time.Duration
		sampled bool
	}{
		{4 * time.Second, true},
		{200 * time.Millisecond, false},
	} {
		t.Run(tt.window.String(), func(t *testing.T) {
			r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid,
				[]Probe{{Func: "main.hit", Stacks: true}, {Func: "time.Sleep"}}, Options{Duration: tt.window})
			if err != nil {
				t.Fatal(err)
			}
			f := find(t, r, "main.hit")
			t.Logf("pre-flight %.0f/s: skipped %q, sampled %+v, %.0f/s, callers %+v, cost %.2f%% of a CPU", f.PreflightPerSec, f.Skipped, f.Sampled, f.PerSec, f.Callers, 100*r.CostCPU)
			if !tt.sampled {
				if !strings.Contains(f.Skipped, "too hot to probe, even in bursts") || f.Count != 0 {
					t.Errorf("main.hit: skipped %q, count %d: want too hot to probe, even in bursts", f.Skipped, f.Count)
				}
				return
			}
			if f.Sampled == nil || f.Sampled.Bursts < minBursts || f.Count == 0 || len(f.Callers) == 0 || f.Callers[0].Func != "main.worker" {
				t.Errorf("main.hit: skipped %q, sampled %+v, callers %+v: want bursts naming main.worker", f.Skipped, f.Sampled, f.Callers)
			}
			// The cost is computed from the calls counted, not timed:
			// the bursts plan 90% of the budget, and one burst that
			// caught more than planned may overshoot a little.
			if r.CostCPU > 0.02 {
				t.Errorf("the probes cost %.2f%% of a CPU, budget 1%%", 100*r.CostCPU)
			}
		})
	}
}

// TestAbsentAndNotGo: an inlined or unknown function is reported, not
// fatal; a process that is not Go is refused with a clear error.
func TestAbsentAndNotGo(t *testing.T) {
	needProbes(t)
	p := startPatient(t, nil, "-mode", "sleep")
	r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid,
		[]Probe{{Func: "main.noSuchFunction"}, {Func: "time.Sleep"}}, Options{Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if f := find(t, r, "main.noSuchFunction"); !strings.Contains(f.Skipped, "not in the binary") {
		t.Errorf("absent function: %q", f.Skipped)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	_, err = Run(context.Background(), proc.NewFS(""), sleep.Process.Pid, []Probe{{Func: "time.Sleep"}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "not a Go program") {
		t.Errorf("probing sleep(1): %v", err)
	}
}
