package goruntime

import (
	"errors"
	"math"
	"os"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
)

// TestDiscoverFixtures reads cgroup v2 and v1 fixtures under testdata/proc
// (their exe links are absent, so they are not Go: GOMAXPROCS is checked
// through computeGOMAXPROCS below).
func TestDiscoverFixtures(t *testing.T) {
	tests := []struct {
		pid                int
		comm               string
		uid, nspid, cpus   int
		version            int
		limit              float64
		periods, throttled uint64
		throttledSec       float64
		envGOMAXPROCS, xdg string
	}{
		{4242, "server", 1000, 17, 8, 2, 1.5, 500, 42, 1.5, "", "/run/user/1000"},
		{4243, "worker", 0, 4243, 2, 1, 0.5, 10, 3, 2, "16", ""},
	}
	for _, tt := range tests {
		f, err := Discover("testdata/proc", tt.pid)
		if err != nil {
			t.Fatal(err)
		}
		c := f.Cgroup
		if f.Comm != tt.comm || f.UID != tt.uid || f.NSPID != tt.nspid || f.AllowedCPUs != tt.cpus || f.IsGo ||
			c.Version != tt.version || c.Limit != tt.limit || c.Periods != tt.periods || c.Throttled != tt.throttled ||
			c.ThrottledSeconds != tt.throttledSec || f.EnvGOMAXPROCS != tt.envGOMAXPROCS || f.XDGRuntimeDir != tt.xdg {
			t.Errorf("pid %d: %+v", tt.pid, f)
		}
	}
	if _, err := Discover("testdata/proc", 999999); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing process: %v", err)
	}
}

func TestComputeGOMAXPROCS(t *testing.T) {
	tests := []struct {
		name      string
		f         Facts
		want      int
		fromWords string
	}{
		{"env", Facts{GoVersion: "go1.26.1", EnvReadable: true, EnvGOMAXPROCS: "7", AllowedCPUs: 2}, 7, "environment"},
		{"bad env ignored", Facts{GoVersion: "go1.26.1", EnvReadable: true, EnvGOMAXPROCS: "x", AllowedCPUs: 4}, 4, "affinity"},
		{"affinity", Facts{GoVersion: "go1.24.3", EnvReadable: true, AllowedCPUs: 8}, 8, "affinity"},
		{"old Go ignores cgroup", Facts{GoVersion: "go1.24.3", AllowedCPUs: 8, Cgroup: CgroupCPU{Limit: 1.5}}, 8, "ignores"},
		{"1.25 rounds quota up", Facts{GoVersion: "go1.25.0", AllowedCPUs: 8, Cgroup: CgroupCPU{Limit: 2.5}}, 3, "rounded up"},
		{"never below 2", Facts{GoVersion: "go1.26.0", AllowedCPUs: 8, Cgroup: CgroupCPU{Limit: 0.5}}, 2, "rounded up"},
		{"fewer CPUs than 2", Facts{GoVersion: "go1.26.0", AllowedCPUs: 1, Cgroup: CgroupCPU{Limit: 0.5}}, 1, "affinity"},
		{"quota above CPUs", Facts{GoVersion: "go1.26.0", AllowedCPUs: 2, Cgroup: CgroupCPU{Limit: 4}}, 2, "no lower"},
		{"go.mod below 1.25", Facts{GoVersion: "go1.26.0", AllowedCPUs: 8, DefaultGODEBUG: "containermaxprocs=0,updatemaxprocs=0",
			Cgroup: CgroupCPU{Limit: 1}}, 8, "containermaxprocs=0"},
		{"GODEBUG env", Facts{GoVersion: "go1.26.0", AllowedCPUs: 8, EnvGODEBUG: "containermaxprocs=0", Cgroup: CgroupCPU{Limit: 1}}, 8, "containermaxprocs=0"},
		{"devel", Facts{GoVersion: "devel go1.27-abc", AllowedCPUs: 8, Cgroup: CgroupCPU{Limit: 3}}, 3, "rounded up"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			f.IsGo = true
			f.computeGOMAXPROCS()
			if f.GOMAXPROCS != tt.want || !strings.Contains(f.GOMAXPROCSFrom, tt.fromWords) {
				t.Errorf("got %d (%s), want %d (%s)", f.GOMAXPROCS, f.GOMAXPROCSFrom, tt.want, tt.fromWords)
			}
		})
	}
}

func TestParsers(t *testing.T) {
	for s, want := range map[string]int{"ff": 8, "3": 2, "ffffffff,00000001": 33, "zz": 0} {
		if got := countCPUMask(s); got != want {
			t.Errorf("countCPUMask(%q) = %d, want %d", s, got, want)
		}
	}
	for s, want := range map[string]float64{"max 100000\n": 0, "150000 100000\n": 1.5, "garbage": 0, "0 100000": 0} {
		if got, _ := parseCPUMax([]byte(s)); got != want {
			t.Errorf("parseCPUMax(%q) = %g, want %g", s, got, want)
		}
	}
	for _, tt := range []struct {
		v            string
		major, minor int
		want         bool
	}{{"go1.25.0", 1, 25, true}, {"go1.24.9", 1, 25, false}, {"go1.26rc1", 1, 26, true}, {"devel go1.27-x", 1, 25, true}, {"weird", 1, 25, true}} {
		if got := GoVersionAtLeast(tt.v, tt.major, tt.minor); got != tt.want {
			t.Errorf("GoVersionAtLeast(%q, %d, %d) = %v", tt.v, tt.major, tt.minor, got)
		}
	}
	if v := godebugValue("a=1,containermaxprocs=0, containermaxprocs=1", "containermaxprocs"); v != "1" {
		t.Errorf("godebugValue: last wins, got %q", v)
	}
}

func TestHistogram(t *testing.T) {
	h := &Histogram{Buckets: []float64{math.Inf(-1), 0, 1, 2, 4, math.Inf(1)}, Counts: []uint64{0, 10, 80, 9, 1}}
	if h.Total() != 100 || h.Quantile(0.05) != 1 || h.Quantile(0.5) != 2 || h.Quantile(1) != 4 || h.Max() != 4 {
		t.Errorf("%v: total %d p5 %g p50 %g p100 %g max %g", h.Counts, h.Total(), h.Quantile(0.05), h.Quantile(0.5), h.Quantile(1), h.Max())
	}
	if e := (&Histogram{Buckets: h.Buckets, Counts: make([]uint64, 5)}); !math.IsNaN(e.Quantile(0.5)) || !math.IsNaN(e.Max()) {
		t.Error("empty histogram quantile is not NaN")
	}
}

// TestAgentMetricsRoundTrip encodes this process's full catalog the way the
// agent does and decodes it.
func TestAgentMetricsRoundTrip(t *testing.T) {
	descs := metrics.All()
	s := make([]metrics.Sample, len(descs))
	for i := range s {
		s[i].Name = descs[i].Name
	}
	metrics.Read(s)
	buf := wire.AppendHeader(nil, 42, 1_700_000_000_000_000_000, "go1.26.8")
	var enc wire.Encoder
	buf = enc.AppendMetrics(buf, s)
	// The second encoding uses the cached bucket text and must be equal.
	again := wire.AppendHeader(nil, 42, 1_700_000_000_000_000_000, "go1.26.8")
	if again = enc.AppendMetrics(again, s); string(again) != string(buf) {
		t.Fatal("cached encoding differs")
	}
	pid, tm, gv, m, err := parseAgentMetrics(buf)
	if err != nil {
		t.Fatal(err)
	}
	if pid != 42 || tm.UnixNano() != 1_700_000_000_000_000_000 || gv != "go1.26.8" || len(m) != len(descs) {
		t.Fatalf("pid %d time %v go %q, %d metrics of %d", pid, tm, gv, len(m), len(descs))
	}
	h := m["/sched/latencies:seconds"].Hist
	if h == nil || !math.IsInf(h.Buckets[0], -1) && h.Buckets[0] != 0 || len(h.Counts) != len(h.Buckets)-1 {
		t.Errorf("sched latencies %+v", h)
	}
	var smp Sample
	sampleFromMetrics(&smp, m)
	for _, bit := range []Known{KnownGoroutines, KnownGoroutinesCreated, KnownGoroutineStates, KnownThreads,
		KnownGOMAXPROCS, KnownGCCycles, KnownGCPauses, KnownHeapLive, KnownScan, KnownCPUClasses, KnownSchedLatency,
		KnownMutexWait, KnownGODEBUG, KnownHeapAlloc} {
		if !smp.Known.Has(bit) {
			t.Errorf("Go 1.26 catalog lacks known bit %b", bit)
		}
	}
}

// TestMalformed feeds broken input to every parser: errors, never panics.
func TestMalformed(t *testing.T) {
	agentCases := []string{
		"", "hello\n", "gosleuth-metrics 1\n", "gosleuth-metrics 1\ntime x\n",
		"gosleuth-metrics 1\ntime 1\nu /a 1 2\n", "gosleuth-metrics 1\ntime 1\nu /a -1\n",
		"gosleuth-metrics 1\ntime 1\nh /h 3 0 1 2 5\n", "gosleuth-metrics 1\ntime 1\nh /h 2 1 0 5\n",
		"gosleuth-metrics 1\ntime 1\nh /h x\n", "gosleuth-metrics 1\ntime 1\nq /a 1\n",
		"gosleuth-metrics 1\ntime 1\nf /a NaNx\n", "gosleuth-metrics 1\ntime 1\nh /h -5 1\n",
	}
	for _, c := range agentCases {
		if _, _, _, _, err := parseAgentMetrics([]byte(c)); !errors.Is(err, ErrMalformed) {
			t.Errorf("agent metrics %q: %v", c, err)
		}
	}
	promCases := []string{"go_goroutines{a=\"b\" 1\n", "go_goroutines one\n", "go_goroutines{a=b} 1\n", "{} 1\n", "x 1 2 3\n"}
	for _, c := range promCases {
		if _, err := parseProm([]byte(c)); !errors.Is(err, ErrMalformed) {
			t.Errorf("prometheus %q: %v", c, err)
		}
	}
	for _, c := range []string{"goroutine 1 running\n", "not a dump at all\n"} {
		if _, err := ParseGoroutines([]byte(c)); !errors.Is(err, ErrMalformed) {
			t.Errorf("dump %q: %v", c, err)
		}
	}
	if _, err := parseHeapMemStats([]byte("heap profile: 1: 2 [3: 4] @ heap/1048576\n# HeapAlloc = 5\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("heap without MemStats: %v", err)
	}
	if _, err := profileTotal([]byte("<html>"), "goroutine profile: total "); !errors.Is(err, ErrMalformed) {
		t.Errorf("profileTotal: %v", err)
	}
}

func TestParseProm(t *testing.T) {
	page := `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
go_info{version="go1.19.8"} 1
go_gc_duration_seconds{quantile="0"} 1e-05
go_gc_duration_seconds{quantile="0.5"} 3e-05
go_gc_duration_seconds{quantile="1"} 0.002
go_gc_duration_seconds_count 17
go_sched_latencies_seconds_bucket{le="1e-06"} 10
go_sched_latencies_seconds_bucket{le="0.001"} 90
go_sched_latencies_seconds_bucket{le="+Inf"} 100
node_x{path="a \"q\", b",other="z"} 3 1700000000
`
	series, err := parseProm([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := promScalar(series, "go_goroutines"); v != 42 || series["node_x"][0].labels["path"] != `a "q", b` ||
		series["node_x"][0].labels["other"] != "z" {
		t.Errorf("series %v", series)
	}
	h := promHistogram(series["go_sched_latencies_seconds_bucket"])
	if h.Total() != 100 || h.Quantile(0.5) != 0.001 || h.Quantile(0.95) != 0.001 || h.Quantile(1) != 0.001 {
		t.Errorf("histogram %+v", h)
	}
	for name, want := range map[string]string{
		"/gc/cycles/total:gc-cycles":        "go_gc_cycles_total_gc_cycles_total",
		"/sync/mutex/wait/total:seconds":    "go_sync_mutex_wait_total_seconds_total",
		"/sched/latencies:seconds":          "go_sched_latencies_seconds",
		"/cpu/classes/gc/total:cpu-seconds": "go_cpu_classes_gc_total_cpu_seconds_total",
		"/gc/heap/live:bytes":               "go_gc_heap_live_bytes",
	} {
		for _, d := range metrics.All() {
			if d.Name == name {
				if got := PromName(d); got != want {
					t.Errorf("PromName(%s) = %s, want %s", name, got, want)
				}
			}
		}
	}
}

func TestParseGoroutines(t *testing.T) {
	b, err := os.ReadFile("testdata/goroutines.txt")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseGoroutines(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Total != 10 || len(d.Groups) < 4 {
		t.Fatalf("total %d in %d groups", d.Total, len(d.Groups))
	}
	g := d.Groups[0]
	if g.Count != 5 || g.State != "chan receive" || g.Frames[0].Func != "main.T.wait" || g.Frames[0].Line != 4 ||
		g.CreatedBy == nil || g.CreatedBy.Func != "main.main" || g.CreatedBy.Line != 7 {
		t.Errorf("largest group %+v", g)
	}
	if d.Groups[1].Count != 3 || d.Groups[1].State != "sync.Mutex.Lock" {
		t.Errorf("second group %+v", d.Groups[1])
	}
	for _, tt := range []struct {
		in      string
		state   string
		minutes int
		locked  bool
	}{{"chan receive, 5 minutes", "chan receive", 5, false}, {"select, 2 minutes, locked to thread", "select", 2, true},
		{"running", "running", 0, false}, {"sync.WaitGroup.Wait (leaked)", "sync.WaitGroup.Wait (leaked)", 0, false}} {
		s, m, l := parseGoroutineState(tt.in)
		if s != tt.state || m != tt.minutes || l != tt.locked {
			t.Errorf("parseGoroutineState(%q) = %q %d %v", tt.in, s, m, l)
		}
	}
}

func TestParseHeapMemStats(t *testing.T) {
	pause := make([]string, 256)
	for i := range pause {
		pause[i] = "0"
	}
	pause[2], pause[3] = "1000", "3000" // GC #3 and #4
	text := "heap profile: 0: 0 [0: 0] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 1\n# TotalAlloc = 100\n" +
		"# Mallocs = 50\n# HeapAlloc = 10\n# HeapObjects = 5\n# NextGC = 4194304\n# PauseNs = [" + strings.Join(pause, " ") +
		"]\n# NumGC = 4\n# GCCPUFraction = 0.015\n"
	ms, err := parseHeapMemStats([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var s Sample
	applyMemStats(&s, ms)
	if s.GCCycles != 4 || s.HeapObjects != 5 || s.HeapGoal != 4194304 || s.AllocBytes != 100 || s.GCCPUFraction != 0.015 ||
		len(s.Pauses) != 4 || s.Pauses[0] != (Pause{4, 3e-6}) || s.Pauses[1] != (Pause{3, 1e-6}) {
		t.Errorf("sample %+v", s)
	}
}
