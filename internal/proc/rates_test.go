package proc

import (
	"math"
	"testing"
	"time"
)

// TestRatesCPU: a process's CPU over an interval is its threads' run time
// where both readings had the threads, split by the interval's ticks (or
// the lifetime's when none landed in it); the ticks otherwise.
func TestRatesCPU(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur Proc
		user, sys float64
		runNS     uint64
		runKnown  bool
	}{
		{"a steady 2% process between whole ticks",
			Proc{UTime: 100, STime: 0, RunMerged: 1e9, Known: KnownCtxsw},
			Proc{UTime: 103, STime: 1, RunMerged: 1.02e9, Known: KnownCtxsw},
			1.5, 0.5, 2e7, true},
		{"no tick in the interval: the lifetime's ratio",
			Proc{UTime: 30, STime: 10, RunMerged: 1e9, Known: KnownCtxsw},
			Proc{UTime: 30, STime: 10, RunMerged: 1.004e9, Known: KnownCtxsw},
			0.3, 0.1, 4e6, true},
		{"threads not read: the ticks",
			Proc{UTime: 100, STime: 0},
			Proc{UTime: 103, STime: 1, RunMerged: 5e9, Known: KnownCtxsw},
			3, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			tc.prev.PID, tc.cur.PID = 7, 7
			prev := Snapshot{Time: t0, Procs: []Proc{tc.prev}}
			cur := Snapshot{Time: t0.Add(time.Second), Procs: []Proc{tc.cur}}
			var r Rates
			r.Compute(&prev, &cur)
			got := r.Procs[0]
			if math.Abs(got.UserPct-tc.user) > 1e-9 || math.Abs(got.SysPct-tc.sys) > 1e-9 || got.RunNS != tc.runNS || got.RunKnown != tc.runKnown {
				t.Errorf("user %v%% sys %v%% run %d (known %v), want %v%% %v%% %d (%v)", got.UserPct, got.SysPct, got.RunNS, got.RunKnown, tc.user, tc.sys, tc.runNS, tc.runKnown)
			}
		})
	}
}

func TestSplitCPU(t *testing.T) {
	for _, tc := range []struct {
		cpu, du, ds, lu, ls float64
		user, sys           float64
	}{
		{1, 3, 1, 0, 0, 0.75, 0.25},
		{1, 0, 0, 1, 1, 0.5, 0.5},
		{1, 0, 0, 0, 0, 1, 0},
		{0, 5, 5, 1, 1, 0, 0},
	} {
		if u, s := SplitCPU(tc.cpu, tc.du, tc.ds, tc.lu, tc.ls); math.Abs(u-tc.user) > 1e-12 || math.Abs(s-tc.sys) > 1e-12 {
			t.Errorf("SplitCPU(%v, %v, %v, %v, %v) = %v, %v; want %v, %v", tc.cpu, tc.du, tc.ds, tc.lu, tc.ls, u, s, tc.user, tc.sys)
		}
	}
}
