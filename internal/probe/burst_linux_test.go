package probe

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// pingCalls asks the slowlock patient for its Lock calls so far.
func pingCalls(t *testing.T, p *patient) (uint64, time.Time) {
	t.Helper()
	io.WriteString(p.in, "\n")
	select {
	case l := <-p.lines:
		var n uint64
		if _, err := fmt.Sscanf(l, "calls %d", &n); err != nil {
			t.Fatalf("patient said %q", l)
		}
		return n, time.Now()
	case <-time.After(10 * time.Second):
		t.Fatal("the patient did not answer")
	}
	return 0, time.Time{}
}

// slowLockLine is the line of the patient's slow Lock call.
func slowLockLine(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("testdata/patient/main.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "// the slow Lock") {
			return i + 1
		}
	}
	t.Fatal("no slow Lock in the patient")
	return 0
}

// TestBurstsLockRecipe: four goroutines make tens of thousands of
// slow-path Lock calls a second, each counted by the patient itself; at a
// budget their probe cannot stay within through the window, the locks
// recipe probes lockSlow in bursts, names the Lock's caller at its file
// and line, says the counts are sampled with the duty cycle, estimates the
// rate within the margin the bursts' spread gives, and leaves no probe in
// the target. The budget is a fifth of the default so that lockSlow is too
// hot to probe throughout even on a loaded host (above 2,200 calls a
// second; the patient makes 20,000 or more on an idle 2-vCPU VM).
func TestBurstsLockRecipe(t *testing.T) {
	needProbes(t)
	// A link over every function, and the perf events attached one by
	// one (each function's span from its own event's attach).
	for _, how := range []string{AttachAuto, AttachPerf} {
		name := how
		if name == AttachAuto {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) { burstsLockRecipe(t, how) })
	}
}

func burstsLockRecipe(t *testing.T, how string) {
	p := startPatient(t, nil, "-mode", "slowlock") // not PIE: the probe point's address is the process's
	pid := p.cmd.Process.Pid
	rc := Recipes["locks"]
	var n0 uint64
	var t0 time.Time
	r, err := Run(context.Background(), proc.NewFS(""), pid, rc.Probes, Options{Duration: 2 * time.Second, Budget: 0.002, Attach: how,
		Attached: func() { n0, t0 = pingCalls(t, p) }})
	if err != nil {
		t.Fatal(err)
	}
	n1, t1 := pingCalls(t, p)
	truth := float64(n1-n0) / t1.Sub(t0).Seconds()
	f := find(t, r, "sync.(*Mutex).lockSlow")
	ans := rc.Statements(r)
	if f.Sampled == nil {
		t.Fatalf("lockSlow at %.0f/s (pre-flight) was not sampled in bursts: skipped %q, notes %q", f.PreflightPerSec, f.Skipped, r.Notes)
	}
	t.Logf("truth %.0f/s, estimated %.0f ± %.0f; lockSlow %+v sampled %+v; cost %.2f%% of a CPU; answer %q; notes %q", truth, f.PerSec, f.Sampled.PerSecMargin, f, f.Sampled, 100*r.CostCPU, ans, r.Notes)
	if s := f.Sampled; s.Bursts < minBursts || s.Duty <= 0 || s.Duty >= 1 || s.Counted == 0 {
		t.Errorf("sampling %+v: want %d bursts or more at a duty below 1", s, minBursts)
	}
	if len(f.Callers) == 0 || f.Callers[0].Func != "main.contend" || !strings.HasSuffix(f.Callers[0].File, "patient/main.go") || f.Callers[0].Line != slowLockLine(t) {
		t.Errorf("callers %+v: want main.contend at patient/main.go:%d", f.Callers, slowLockLine(t))
	}
	if d := f.PerSec - truth; d > f.Sampled.PerSecMargin || -d > f.Sampled.PerSecMargin {
		t.Errorf("estimated %.0f ± %.0f calls/s, the patient made %.0f/s", f.PerSec, f.Sampled.PerSecMargin, truth)
	}
	all := strings.Join(ans, "\n")
	if !strings.Contains(all, "main.contend") || !strings.Contains(all, "sampled") || !strings.Contains(all, "% of the window") {
		t.Errorf("answer %q: want main.contend, sampled, and the duty cycle", ans)
	}
	// Nothing stays attached: every probe point holds its own code.
	tg, err := Resolve(proc.NewFS(""), pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range r.Funcs {
		if fn.Kind == "" {
			continue
		}
		pt, err := tg.Find(fn.Func)
		if err != nil {
			t.Fatal(err)
		}
		if b := probeByte(t, pid, pt.Addr); b == 0xcc {
			t.Errorf("after Run an int3 is left at %s", fn.Func)
		}
	}
	if _, events := uprobeEvents(t); strings.Contains(events(), tracefsGroup(os.Getpid())+"/") {
		t.Errorf("uprobe_events holds our definitions after Run: %q", events())
	}
}

// TestSIGKILLDuringBursts SIGKILLs a run while one of its bursts has
// lockSlow attached, and requires the target's code restored within 1 s
// and the target alive: a burst's link, like the window's, is the
// kernel's to drop with its owner.
func TestSIGKILLDuringBursts(t *testing.T) {
	if pid, err := strconv.Atoi(os.Getenv("GOSLEUTH_BURST_CHILD")); err == nil {
		Run(context.Background(), proc.NewFS(""), pid, Recipes["locks"].Probes,
			Options{Duration: time.Minute, Budget: 0.002, Attached: func() { fmt.Println("attached") }})
		return
	}
	needProbes(t)
	p := startPatient(t, nil, "-mode", "slowlock")
	pid := p.cmd.Process.Pid
	tg, err := Resolve(proc.NewFS(""), pid)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := tg.Find("sync.(*Mutex).lockSlow")
	if err != nil {
		t.Fatal(err)
	}
	orig := probeByte(t, pid, pt.Addr)
	child := startAttachedChild(t, "TestSIGKILLDuringBursts", "GOSLEUTH_BURST_CHILD="+strconv.Itoa(pid))
	// Wait for a burst (the int3 in place), then kill.
	deadline := time.Now().Add(10 * time.Second)
	for probeByte(t, pid, pt.Addr) != 0xcc {
		if time.Now().After(deadline) {
			t.Fatal("no burst attached lockSlow in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	child.Process.Kill()
	gone := waitRestored(t, pid, pt.Addr, orig)
	t.Logf("int3 gone %v after SIGKILL during a burst", gone)
	if err := proc.CheckTarget("", pid); err != nil {
		t.Errorf("the target did not survive: %v", err)
	}
	if _, events := uprobeEvents(t); strings.Contains(events(), tracefsGroup(child.Process.Pid)+"/") {
		t.Errorf("uprobe_events holds the killed run's definitions: %q", events())
	}
}

// TestSteadyMovedToBursts: a function idle through the pre-flight is put
// on the steady link, then called hundreds of thousands of times a second
// once the window starts: within the window it is moved to the bursts and
// reported as sampled, with its caller.
func TestSteadyMovedToBursts(t *testing.T) {
	needProbes(t)
	p := startPatient(t, []string{"-ldflags=-s -w"}, "-mode", "count", "-n", "1000000000")
	r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid, []Probe{{Func: "main.hit", Stacks: true}},
		Options{Duration: 2 * time.Second, Attached: func() { io.WriteString(p.in, "go\n") }})
	if err != nil {
		t.Fatal(err)
	}
	f := find(t, r, "main.hit")
	t.Logf("pre-flight %.0f/s; sampled %+v, %.0f/s; cost %.2f%% of a CPU over %.2fs; notes %q", f.PreflightPerSec, f.Sampled, f.PerSec, 100*r.CostCPU, r.Seconds, r.Notes)
	if f.PreflightPerSec != 0 || f.Sampled == nil || f.Sampled.Duty >= 1 || len(f.Callers) == 0 || f.Callers[0].Func != "main.worker" {
		t.Errorf("main.hit: pre-flight %.0f/s, sampled %+v, callers %+v: want idle in the pre-flight, then sampled naming main.worker", f.PreflightPerSec, f.Sampled, f.Callers)
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "moved to the bursts") {
		t.Errorf("notes %q do not say the function was moved to the bursts", r.Notes)
	}
	// The cost is not asserted: how much the steady link spends before
	// it is judged depends on how soon the scheduler runs (every 2 ms
	// here; later on a loaded host, and under the race detector).
}
