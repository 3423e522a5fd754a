//go:build linux

package goruntime

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// TestMain removes the patient built for the tests.
func TestMain(m *testing.M) { testbin.Main(m) }

// buildPatient builds testdata/patient once per test binary.
func buildPatient(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "./testdata/patient")
}

// patient is a running patient process and the address its "ready" line
// named (the agent's socket, a pprof or /metrics server).
type patient struct {
	*testbin.Proc
	addr string
}

// startPatient runs the patient with args (optionally under a wrapper such
// as taskset) and waits for its "ready" line.
func startPatient(t *testing.T, env []string, wrapper []string, args ...string) *patient {
	t.Helper()
	argv := append(append(append([]string(nil), wrapper...), buildPatient(t)), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := testbin.Start(t, cmd, testbin.Options{Ready: func(l string) bool { return strings.HasPrefix(l, "ready ") },
		Lines: true, Stop: syscall.SIGTERM})
	return &patient{Proc: p, addr: strings.TrimPrefix(p.Ready(), "ready ")}
}

func (p *patient) pid() int { return p.PID() }

// self asks the patient for its own runtime/metrics reading.
func (p *patient) self(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	p.AskJSON(t, syscall.SIGUSR1, "self ", &m, 30*time.Second)
	return m
}

// selfFloat reads a number from a patient report.
func selfFloat(t *testing.T, m map[string]json.RawMessage, name string) float64 {
	t.Helper()
	var v float64
	if err := json.Unmarshal(m[name], &v); err != nil {
		t.Fatalf("patient report lacks %s: %v", name, err)
	}
	return v
}

// selfHist reads a histogram's counts from a patient report.
func selfHist(t *testing.T, m map[string]json.RawMessage, name string) []uint64 {
	t.Helper()
	var v []uint64
	if err := json.Unmarshal(m[name], &v); err != nil {
		t.Fatalf("patient report lacks %s: %v", name, err)
	}
	return v
}

// selfWindow is the patient's own view of a window, computed here
// independently of window.RuntimeBetween.
type selfWindow struct {
	sec                       float64
	cycles                    float64
	gcShare, assistShare      float64
	mutexPerSec               float64
	goroutines, numGoroutine  float64
	schedCounts               []uint64
	gomaxprocs, heapLive      float64
	createdPerSec, allocBytes float64
}

func newSelfWindow(t *testing.T, a, b map[string]json.RawMessage) selfWindow {
	d := func(name string) float64 { return selfFloat(t, b, name) - selfFloat(t, a, name) }
	w := selfWindow{sec: d("time") / 1e9}
	w.cycles = d("/gc/cycles/total:gc-cycles")
	busy := d("/cpu/classes/total:cpu-seconds") - d("/cpu/classes/idle:cpu-seconds")
	w.gcShare = d("/cpu/classes/gc/total:cpu-seconds") / busy
	w.assistShare = d("/cpu/classes/gc/mark/assist:cpu-seconds") / busy
	w.mutexPerSec = d("/sync/mutex/wait/total:seconds") / w.sec
	w.createdPerSec = d("/sched/goroutines-created:goroutines") / w.sec
	w.allocBytes = d("/gc/heap/allocs:bytes") / w.sec
	w.goroutines = selfFloat(t, b, "/sched/goroutines:goroutines")
	w.numGoroutine = selfFloat(t, b, "NumGoroutine")
	w.gomaxprocs = selfFloat(t, b, "/sched/gomaxprocs:threads")
	w.heapLive = selfFloat(t, b, "/gc/heap/live:bytes")
	ha, hb := selfHist(t, a, "/sched/latencies:seconds"), selfHist(t, b, "/sched/latencies:seconds")
	w.schedCounts = make([]uint64, len(hb))
	for i := range hb {
		w.schedCounts[i] = hb[i] - ha[i]
	}
	return w
}

// readWindow reads the source over about d, bracketed by the patient's own
// reports, and returns both views.
func readWindow(t *testing.T, p *patient, src Source, d time.Duration) (*Window, selfWindow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
	defer cancel()
	sa := p.self(t)
	a, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	b, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := p.self(t)
	return between(a, b), newSelfWindow(t, sa, sb)
}

// within reports whether got is within rel (relative) or abs of want.
func within(got, want, rel, abs float64) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= abs || diff <= rel*want
}

// dur prints seconds as a duration, for test logs.
func dur(s float64) string { return time.Duration(s * float64(time.Second)).String() }
