package syscallsview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// TestReportOutputs pins the text and JSON reports (with golden files).
func TestReportOutputs(t *testing.T) {
	failed := uint64(2)
	code := 0
	r := &syscalls.Report{Mode: syscalls.ModeExact, Mechanism: "perf counters", PID: 42, Comm: "patient", DurationS: 2, Total: 120,
		Threads: 5, ThreadsLater: 1, Exited: true, ExitCode: &code,
		Syscalls: []syscalls.Row{{Name: "futex", Nr: 202, Count: 120, RatePerS: 60, Percent: 100, Errors: &failed,
			Latency: &syscalls.Latency{Calls: 120, TotalNS: 1200000, AvgNS: 10000, P99NS: 50000, MaxNS: 90000}}},
		ErrorsByErrno: []syscalls.ErrnoRow{{Name: "futex", Nr: 202, Errno: "ETIMEDOUT", Count: 2}}, Sampled: 5}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"syscalls of pid 42 (patient), exact",
		"mechanism: perf counters",
		"window 2.00s, 5 threads at attach, 1 found later, 0 events lost, target exited (status 0)",
		"         120         60.0   100.00         2         1.2      10.00      50.00      90.00  futex",
		"         120         60.0   100.00  total",
		"           2  ETIMEDOUT        futex",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "duration_s", "pid", "total", "syscalls", "lost", "exited", "errors_by_errno"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, js.String())
		}
	}
	row := m["syscalls"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "nr", "count", "rate_per_s", "errors", "latency"} {
		if _, ok := row[k]; !ok {
			t.Errorf("JSON row lacks %q", k)
		}
	}
	golden.Check(t, "report.txt", text.Bytes())
	golden.Check(t, "report.json", js.Bytes())
}
