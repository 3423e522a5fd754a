package inspect

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/window"
)

// fakeReport is a report as Run builds it for a Go program with its agent,
// from two fixed runtime readings one second apart.
func fakeReport() *Report {
	t0 := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	known := goruntime.KnownGoroutines | goruntime.KnownThreads | goruntime.KnownGOMAXPROCS |
		goruntime.KnownGCCycles | goruntime.KnownHeapLive | goruntime.KnownHeapGoal | goruntime.KnownAllocs
	a := &goruntime.Sample{Time: t0, Source: "agent", GoVersion: "go1.26.8", Known: known,
		Goroutines: 40, Threads: 9, GOMAXPROCS: 2, GCCycles: 100, HeapLive: 8 << 20, HeapGoal: 16 << 20,
		AllocBytes: 1 << 30, AllocObjects: 10_000_000}
	b := *a
	b.Time = t0.Add(time.Second)
	b.Goroutines, b.GCCycles, b.AllocBytes, b.AllocObjects = 52, 104, 1<<30+64<<20, 10_500_000
	return &Report{
		Facts: &goruntime.Facts{PID: 4242, Comm: "api", Exe: "/srv/api", IsGo: true, GoVersion: "go1.26.8",
			Path: "example.com/api", Module: "example.com/api", ModuleVersion: "v1.2.3",
			EnvReadable: true, GOMAXPROCS: 2, GOMAXPROCSFrom: "computed", AllowedCPUs: 2, AllowedCPUList: "0-1"},
		Proc: &ProcView{Seconds: 1, UserPct: 12.5, SysPct: 3.25, RSSBytes: 48 << 20, Threads: 9,
			FDs: 17, FDLimit: 1024, WakeupsPerSec: 1010},
		Source: "agent", SourceAddr: "/run/user/1000/gosleuth-4242.sock",
		Window: window.RuntimeBetween(a, &b),
		Notes:  []string{"a note"},
	}
}

// TestReportGolden pins inspect's text and JSON reports.
func TestReportGolden(t *testing.T) {
	r := fakeReport()
	var txt, js bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "report.txt", txt.Bytes())
	golden.Check(t, "report.json", js.Bytes())
}

// TestNum: counts and rates print compactly and never in e notation
// (5,400 objects a second once read "5.4e+03").
func TestNum(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {0.25, "0.25"}, {12.34, "12.3"}, {100.4, "100"}, {5400.5, "5400"}, {9999.9, "10000"},
		{27300, "27.3k"}, {2.5e6, "2.5M"}, {3e9, "3G"},
	} {
		if got := num(tt.v); got != tt.want {
			t.Errorf("num(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

// TestThreadsCreated: from a source that counts the threads the runtime
// created (pprof's threadcreate, client_golang), the line says so and
// gives the live count from /proc beside it, not "6 created" above
// "/proc ... 5 threads" with nothing to tell them apart.
func TestThreadsCreated(t *testing.T) {
	r := fakeReport()
	r.Source = "pprof"
	r.Window.Threads, r.Proc.Threads = 6, 5
	var txt bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if want := "6 threads created since start (5 live) vs GOMAXPROCS 2"; !bytes.Contains(txt.Bytes(), []byte(want)) {
		t.Errorf("no %q in:\n%s", want, txt.String())
	}
}
