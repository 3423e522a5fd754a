package syscalls

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/golden"
)

func TestRows(t *testing.T) {
	evs := []Event{{Name: "read", Nr: 0}, {Name: "futex", Nr: 202}, {Name: "close", Nr: 3}, {Name: "all", Nr: -1, Raw: true}, {Name: "write", Nr: 1}}
	rows, total := Rows(evs, []uint64{30, 60, 0, 500, 30}, 2)
	if total != 120 {
		t.Fatalf("total %d, want 120 (raw and zero rows left out)", total)
	}
	want := []Row{
		{Name: "futex", Nr: 202, Count: 60, RatePerS: 30, Percent: 50},
		{Name: "read", Nr: 0, Count: 30, RatePerS: 15, Percent: 25},
		{Name: "write", Nr: 1, Count: 30, RatePerS: 15, Percent: 25},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i := range want {
		if rows[i].Name != want[i].Name || rows[i].Count != want[i].Count || rows[i].RatePerS != want[i].RatePerS || rows[i].Percent != want[i].Percent {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestReportOutputs(t *testing.T) {
	failed := uint64(2)
	code := 0
	r := &Report{Mode: ModeExact, Mechanism: "perf counters", PID: 42, Comm: "patient", DurationS: 2, Total: 120,
		Threads: 5, ThreadsLater: 1, Exited: true, ExitCode: &code,
		Syscalls: []Row{{Name: "futex", Nr: 202, Count: 120, RatePerS: 60, Percent: 100, Errors: &failed,
			Latency: &Latency{Calls: 120, TotalNS: 1200000, AvgNS: 10000, P99NS: 50000, MaxNS: 90000}}},
		ErrorsByErrno: []ErrnoRow{{Name: "futex", Nr: 202, Errno: "ETIMEDOUT", Count: 2}}, Sampled: 5}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
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
	if err := r.WriteJSON(&js); err != nil {
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

func TestProcSamplerParse(t *testing.T) {
	s := NewProcSampler("testdata/proc", 1, AMD64)
	for _, line := range []string{
		"running",
		"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x4600",
		"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x4600\n",
		"35 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4600",
		"-1 0x7ffd 0x4600",
	} {
		s.add([]byte(line))
	}
	var a Approx
	s.Fill(&a)
	if a.Samples != 5 || a.Running != 20 || a.User != 20 || len(a.Blocked) != 2 ||
		a.Blocked[0].Name != "futex" || a.Blocked[0].Samples != 2 || a.Blocked[1].Name != "nanosleep" {
		t.Errorf("approx %+v", a)
	}
}
