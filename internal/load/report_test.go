package load

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
)

// goldenLoadReport is a two-step ramp built in the test: a valid step with
// a watched target and an invalid one whose requests were left unanswered.
func goldenLoadReport() *Report {
	lat := Percentiles{P50: 0.21, P90: 0.44, P99: 1.3, P999: 2.7, Max: 3.1, Mean: 0.25}
	tgt := &TargetStats{PID: 4242, CPUUser: 0.12, CPUSys: 0.08, RSSMaxBytes: 25 << 20, MaxThreads: 9, VolCtxsw: 5400, InvolCtxsw: 12}
	return &Report{
		URL: "http://127.0.0.1:8080/api", Method: "GET", Connections: 50, Proto: "http/1.1",
		Start: time.Unix(1000, 0).UTC(),
		Steps: []*StepResult{
			{Index: 1, Phase: "ramp", TargetRate: 1000, AchievedRate: 1000.2, Requests: 9001, Seconds: 9, WarmupSeconds: 1,
				Valid: true, Latency: lat, Uncorrected: lat, Lag: Lag{P99: 0.05, Max: 0.2}, ErrorKinds: map[string]int64{},
				Status: map[string]int64{"200": 9001}, MaxConnections: 12, GenCPU: 0.05, ReqPerCPUSecond: 20000, Target: tgt},
			{Index: 2, Phase: "ramp", TargetRate: 2000, AchievedRate: 1500, Requests: 13000, Seconds: 9, WarmupSeconds: 1,
				Valid: false, Invalid: []string{"40 of the 40 requests in flight at the end failed or got no answer within 10s (counted as errors)"},
				Latency: lat, Uncorrected: lat, Errors: 40, ErrorKinds: map[string]int64{"timeout": 40},
				Status: map[string]int64{"200": 12960}, InFlightAtEnd: 40, Unanswered: 0, MaxConnections: 50, GenCPU: 0.09, Target: tgt},
		},
		Ticks: []Tick{
			{T: 1, Step: 1, TargetRate: 1000, Warmup: true, Requests: 1000, Rate: 1000, Latency: lat, Connections: 10, GenCPU: 0.05,
				Target: &TargetTick{CPUUser: 0.12, CPUSys: 0.08, RSSBytes: 25 << 20, Threads: 9, VolCtxsw: 5400, InvolCtxsw: 12}},
			{T: 2, Step: 2, TargetRate: 2000, Requests: 1500, Rate: 1500, Errors: 40, Latency: lat, InFlight: 40, Connections: 50, GenCPU: 0.09},
		},
	}
}

func TestReportGolden(t *testing.T) {
	r := goldenLoadReport()
	var text, csv bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteCSV(&csv); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.txt", text.Bytes())
	golden.Check(t, "series.csv", csv.Bytes())
}

// TestSearchWithoutFailure: a search whose ramp never failed says so, not
// "failed at 0".
func TestSearchWithoutFailure(t *testing.T) {
	r := goldenLoadReport()
	r.SLA = &SearchResult{SLA: "p99<=15ms", Found: true, MaxRate: 400, Min: 400, Max: 400, Repeats: []float64{400}, LastPass: 400}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if s := text.String(); bytes.Contains(text.Bytes(), []byte("failed at 0")) || !bytes.Contains(text.Bytes(), []byte("ramp passed at 400, no rate of the ramp failed")) {
		t.Errorf("report:\n%s", s)
	}
}
