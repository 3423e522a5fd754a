package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

func runRecipe(t *testing.T, name string, mode string) (*Result, []string) {
	t.Helper()
	p := startPatient(t, []string{"-ldflags=-s -w"}, "-mode", mode)
	rc := Recipes[name]
	r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid, rc.Probes, Options{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans := rc.Answer(r)
	t.Logf("%s: %q", name, ans)
	return r, ans
}

// TestRecipeLocks: eight goroutines contending on one mutex in
// main.critical: the slow path and the parks are counted, the caller named
// on a stripped binary, and the one mutex found by both.
func TestRecipeLocks(t *testing.T) {
	needProbes(t)
	r, ans := runRecipe(t, "locks", "lock")
	f, ok := stat(r, "sync.(*Mutex).lockSlow")
	if !ok || f.Count == 0 || f.Symbol != "internal/sync.(*Mutex).lockSlow" {
		t.Fatalf("lockSlow: %+v (Go 1.24+ names it internal/sync.(*Mutex).lockSlow)", f)
	}
	if len(f.Callers) == 0 || f.Callers[0].Func != "main.critical" || f.Callers[0].Share < 0.9 {
		t.Errorf("callers %+v: want main.critical", f.Callers)
	}
	if len(f.Args) == 0 || f.Args[0].Share < 0.99 {
		t.Errorf("mutexes %+v: want one", f.Args)
	}
	// Eight goroutines on a lock held ~100 µs sleep on it, not only spin:
	// the park is counted, from the same caller, on the same mutex.
	p, ok := stat(r, SemacquireMutex)
	if !ok || p.Count == 0 || len(p.Callers) == 0 || p.Callers[0].Func != "main.critical" {
		t.Errorf("parks: %+v, want main.critical's", p)
	}
	if len(p.Args) > 0 && len(f.Args) > 0 {
		if m, _ := MutexOf(SemacquireMutex, p.Args[0].Value); m != f.Args[0].Value {
			t.Errorf("parked on the mutex at %#x, slow Locks on %#x", m, f.Args[0].Value)
		}
	}
	if len(ans) < 2 || !strings.Contains(strings.Join(ans, "\n"), "main.critical") {
		t.Errorf("answer %q does not name main.critical", ans)
	}
}

// TestRecipeGoroutines: a program that starts 200 goroutines a second that
// never end: created minus exited is about +200/s, created by
// main.spawnLeaky.
func TestRecipeGoroutines(t *testing.T) {
	needProbes(t)
	r, ans := runRecipe(t, "goroutines", "spawn")
	np, _ := stat(r, "runtime.newproc")
	ex, _ := stat(r, "runtime.goexit1")
	if net := np.PerSec - ex.PerSec; net < 50 || net > 250 {
		t.Errorf("net %.0f/s (created %.0f, exited %.0f): want about +180", net, np.PerSec, ex.PerSec)
	}
	if len(np.Callers) == 0 || np.Callers[0].Func != "main.spawnLeaky" {
		t.Errorf("creators %+v: want main.spawnLeaky", np.Callers)
	}
	if len(ans) < 2 || !strings.Contains(ans[1], "main.spawnLeaky") {
		t.Errorf("answer %q", ans)
	}
}

// TestRecipeTimers: the 1 ms sleep loop is named with its period.
func TestRecipeTimers(t *testing.T) {
	needProbes(t)
	_, ans := runRecipe(t, "timers", "sleep")
	if len(ans) == 0 || !strings.Contains(ans[0], "main.poll") || !strings.Contains(ans[0], "1ms") {
		t.Errorf("answer %q: want main.poll sleeping 1ms", ans)
	}
}
