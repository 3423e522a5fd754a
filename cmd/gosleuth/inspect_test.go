package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestInspectUsage(t *testing.T) {
	tests := []struct {
		args  []string
		words string
	}{
		{[]string{"inspect"}, "--pid is required"},
		{[]string{"inspect", "--pid", "-3"}, "--pid is required"},
		{[]string{"inspect", "--pid", "1", "--duration", "1ms"}, "at least 100ms"},
		{[]string{"inspect", "--pid", "1", "--format", "xml"}, "text or json"},
		{[]string{"inspect", "--pid", "1", "--groups", "-1"}, "must not be negative"},
		{[]string{"inspect", "--pid", "1", "--pprof-url", "http://a", "--metrics-url", "http://b"}, "not both"},
		{[]string{"inspect", "--pid", "1", "extra"}, "no arguments"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, &bytes.Buffer{}, &bytes.Buffer{})
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.words) {
			t.Errorf("%q: %v, want usage error with %q", tt.args, err, tt.words)
		}
	}
}

// TestInspect runs inspect on the goruntime test patient, built once.
func TestInspect(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := filepath.Join(t.TempDir(), "patient")
	if out, err := exec.Command("go", "build", "-o", bin, "../../internal/goruntime/testdata/patient").CombinedOutput(); err != nil {
		t.Fatalf("build patient: %v\n%s", err, out)
	}
	t.Run("agent JSON", func(t *testing.T) { testInspectAgentJSON(t, bin) })
	t.Run("without source", func(t *testing.T) { testInspectWithoutSource(t, bin) })
	t.Run("trace and text", func(t *testing.T) { testInspectTrace(t, bin) })
	t.Run("unprivileged", func(t *testing.T) { testInspectUnprivileged(t, bin) })
	t.Run("another process's URL", func(t *testing.T) { testURLOwner(t, bin) })
}

// testInspectUnprivileged runs inspect as user nobody on root's patient:
// the executable and environment are unreadable, the agent socket is out
// of reach; it says so and still shows /proc facts.
func testInspectUnprivileged(t *testing.T, bin string) {
	testenv.Require(t, testenv.Nobody)
	cmd := startInspectPatient(t, bin, "-mode", "idle", "-agent")
	test := nobodyBinary(t)
	stdout, stderr, code := runChild(t, test, nobody,
		"inspect", "--pid", strconv.Itoa(cmd.Process.Pid), "--duration", "200ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, w := range []string{"unknown: executable unreadable", "environment unreadable", "/proc", "run gosleuth as the process's user or as root"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("output lacks %q:\n%s", w, stdout)
		}
	}
}

// testInspectTrace: text output of a herd patient with the FlightRecorder,
// and its snapshot saved with --trace.
func testInspectTrace(t *testing.T, bin string) {
	cmd := startInspectPatient(t, bin, "-mode", "herd", "-agent", "-flight")
	path := filepath.Join(t.TempDir(), "x.trace")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"inspect", "--pid", strconv.Itoa(cmd.Process.Pid), "--duration", "1s",
		"--trace", path, "--groups", "2", "--dump-max", "-1"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"runtime", "sched latency", "mutex wait", "goroutines by stack", "sync.Cond.Wait", "written to " + path} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasPrefix(string(b), "go 1.") {
		t.Errorf("trace file: %v, %d bytes", err, len(b))
	}
}

// startInspectPatient runs goruntime's patient (bin) with args and waits
// for its "ready" line; its later lines are kept for selfReport.
func startInspectPatient(t *testing.T, bin string, args ...string) *testbin.Proc {
	t.Helper()
	p, _ := startPatientAt(t, bin, args...)
	return p
}

// startPatientAt is startInspectPatient that also returns the address the
// patient said it serves at ("-" without one).
func startPatientAt(t *testing.T, bin string, args ...string) (*testbin.Proc, string) {
	t.Helper()
	// SIGTERM lets the patient close its agent and remove its socket.
	p := testbin.Start(t, exec.Command(bin, args...), testbin.Options{
		Ready: func(l string) bool { return strings.HasPrefix(l, "ready ") }, Lines: true, Stop: syscall.SIGTERM})
	return p, strings.TrimPrefix(p.Ready(), "ready ")
}

// selfReport asks the patient for its own runtime/metrics.
func selfReport(t *testing.T, p *testbin.Proc) map[string]float64 {
	t.Helper()
	m := map[string]any{}
	p.AskJSON(t, syscall.SIGUSR1, "self ", &m, 30*time.Second)
	out := map[string]float64{}
	for k, v := range m {
		if f, ok := v.(float64); ok {
			out[k] = f
		}
	}
	return out
}

// testInspectAgentJSON runs inspect on a GC-heavy patient with the agent
// and checks its JSON against the patient's own runtime/metrics over the
// same window.
func testInspectAgentJSON(t *testing.T, bin string) {
	cmd := startInspectPatient(t, bin, "-mode", "gc", "-agent")
	a := selfReport(t, cmd)
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"inspect", "--pid", strconv.Itoa(cmd.Process.Pid),
		"--duration", "3s", "--format", "json"}, &out, &errb)
	b := selfReport(t, cmd)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, errb.String())
	}
	var rep struct {
		Facts struct {
			IsGo       bool   `json:"is_go"`
			GoVersion  string `json:"go_version"`
			GOMAXPROCS int    `json:"gomaxprocs"`
		} `json:"facts"`
		Proc   *struct{ Threads int } `json:"proc"`
		Source string                 `json:"source"`
		Window map[string]any         `json:"window"`
		Dump   *struct {
			Total  int `json:"total"`
			Groups []struct {
				Count int `json:"count"`
			} `json:"groups"`
		} `json:"goroutines"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if !rep.Facts.IsGo || rep.Facts.GoVersion != runtime.Version() || rep.Source != "agent" || rep.Proc == nil || rep.Dump == nil {
		t.Fatalf("report %s", out.String())
	}
	w := rep.Window
	num := func(k string) float64 {
		f, ok := w[k].(float64)
		if !ok {
			t.Errorf("window %s = %v, want a number", k, w[k])
		}
		return f
	}
	if int(num("gomaxprocs")) != rep.Facts.GOMAXPROCS || num("gomaxprocs") != b["/sched/gomaxprocs:threads"] {
		t.Errorf("GOMAXPROCS: window %v, facts %d, patient %v", w["gomaxprocs"], rep.Facts.GOMAXPROCS, b["/sched/gomaxprocs:threads"])
	}
	cycles := b["/gc/cycles/total:gc-cycles"] - a["/gc/cycles/total:gc-cycles"]
	if got := num("gc_cycles"); got < cycles-max(3, 0.3*cycles) || got > cycles {
		t.Errorf("GC cycles: inspect %v, patient %v (over a slightly longer window)", got, cycles)
	}
	busy := (b["/cpu/classes/total:cpu-seconds"] - b["/cpu/classes/idle:cpu-seconds"]) -
		(a["/cpu/classes/total:cpu-seconds"] - a["/cpu/classes/idle:cpu-seconds"])
	share := (b["/cpu/classes/gc/total:cpu-seconds"] - a["/cpu/classes/gc/total:cpu-seconds"]) / busy
	switch {
	case num("gc_cycles") < 2:
		// Too few cycles on a starved machine: the share must be withheld.
		if w["gc_cpu_share"] != nil {
			t.Errorf("GC CPU share %v reported over %v cycles", w["gc_cpu_share"], w["gc_cycles"])
		}
	default:
		if got := num("gc_cpu_share"); got < share-0.1 || got > share+0.1 {
			t.Errorf("GC CPU share: inspect %v, patient %v", got, share)
		}
	}
	if d := rep.Dump; d.Total < 2 || len(d.Groups) == 0 || int(num("goroutines")) < d.Total {
		t.Errorf("dump %+v vs goroutines %v", d, w["goroutines"])
	}
	for _, k := range []string{"sched_latency_p99_seconds", "mutex_wait_per_sec", "heap_live_bytes", "scan_heap_bytes"} {
		num(k)
	}
}

// testInspectWithoutSource: a Go program without agent or URL, and a
// process that is not Go, still give discovery and /proc facts and a hint.
func testInspectWithoutSource(t *testing.T, bin string) {
	cmd := startInspectPatient(t, bin, "-mode", "idle")
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	tests := []struct {
		pid   int
		words []string
	}{
		// A Go program with no agent and no endpoint: its runtime is read
		// from its memory.
		{cmd.Process.Pid, []string{"GOMAXPROCS", "/proc", "from memory at", "runtime books", "goroutines by stack"}},
		{sleeper.Process.Pid, []string{"not a Go program", "/proc", "1 thread,"}}, // sleep is one thread
	}
	for _, tt := range tests {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"inspect", "--pid", strconv.Itoa(tt.pid), "--duration", "200ms"},
			&out, &bytes.Buffer{}); err != nil {
			t.Fatalf("pid %d: %v", tt.pid, err)
		}
		for _, w := range tt.words {
			if !strings.Contains(out.String(), w) {
				t.Errorf("pid %d: output lacks %q:\n%s", tt.pid, w, out.String())
			}
		}
	}
	err := run(context.Background(), []string{"inspect", "--pid", "536870000", "--duration", "200ms"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing process: %v", err)
	}
}
