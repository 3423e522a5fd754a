package window

import (
	"maps"
	"math"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
)

func TestStepOf(t *testing.T) {
	threads := proc.KnownCtxsw
	for _, tc := range []struct {
		name           string
		earlier, later *proc.Proc
		cpu, user, sys float64
		wakeups        uint64
		switchesKnown  bool
	}{
		{"run time, split by the interval's ticks",
			&proc.Proc{UTime: 100, STime: 100, RunMerged: 2e9, VolMerged: 10, Known: threads},
			&proc.Proc{UTime: 103, STime: 101, RunMerged: 2.0355e9, VolMerged: 25, Known: threads},
			0.0355, 0.0355 * 3 / 4, 0.0355 / 4, 15, true},
		{"no tick in the interval: the lifetime's ratio",
			&proc.Proc{UTime: 30, STime: 10, RunMerged: 5e8, Known: threads},
			&proc.Proc{UTime: 30, STime: 10, RunMerged: 5.04e8, Known: threads},
			0.004, 0.003, 0.001, 0, true},
		{"threads unread at one end: the ticks",
			&proc.Proc{UTime: 100, STime: 100},
			&proc.Proc{UTime: 104, STime: 101, RunMerged: 9e9, VolMerged: 99, Known: threads},
			0.05, 0.04, 0.01, 0, false},
		{"born in the interval: all it did",
			nil,
			&proc.Proc{UTime: 1, STime: 1, RunMerged: 2.5e7, VolMerged: 7, Known: threads},
			0.025, 0.0125, 0.0125, 7, true},
		{"a counter that went back counts nothing",
			&proc.Proc{UTime: 100, RunMerged: 5e9, Known: threads},
			&proc.Proc{UTime: 100, RunMerged: 4e9, Known: threads},
			0, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := StepOf(tc.earlier, tc.later)
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if !near(st.CPUSec, tc.cpu) || !near(st.UserSec, tc.user) || !near(st.SysSec, tc.sys) ||
				st.Wakeups != tc.wakeups || st.SwitchesKnown != tc.switchesKnown {
				t.Errorf("got %+v, want CPU %v (user %v, sys %v), wake-ups %d known %v", st, tc.cpu, tc.user, tc.sys, tc.wakeups, tc.switchesKnown)
			}
		})
	}
}

// TestBetweenCPU: the CPU between two windows is the run time between
// them, split by the ticks between them; without run times, the ticks.
func TestBetweenCPU(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(sec, run, tu, ts float64, known bool) *Window {
		w := &Window{Start: t0, End: t0.Add(time.Duration(sec * float64(time.Second))), RunSec: run, RunKnown: known,
			TickUserSec: tu, TickSysSec: ts, lifeUser: 100 * tu, lifeSys: 100 * ts, IOCalls: -1}
		w.splitCPU()
		return w
	}
	for _, tc := range []struct {
		name           string
		earlier, later *Window
		user, sys      float64
	}{
		{"run time", mk(1, 0.5, 0.3, 0.2, true), mk(2, 0.52, 0.33, 0.21, true), 0.015, 0.005},
		{"no tick between: the lifetime's ratio", mk(1, 0.5, 0.3, 0.1, true), mk(2, 0.504, 0.3, 0.1, true), 0.003, 0.001},
		{"ticks", mk(1, 0, 0.3, 0.2, false), mk(2, 0.9, 0.33, 0.21, true), 0.03, 0.01},
	} {
		d := Between(tc.earlier, tc.later)
		if math.Abs(d.UserSec-tc.user) > 1e-9 || math.Abs(d.SysSec-tc.sys) > 1e-9 {
			t.Errorf("%s: user %v sys %v, want %v and %v", tc.name, d.UserSec, d.SysSec, tc.user, tc.sys)
		}
	}
}

func TestSyscallsBetween(t *testing.T) {
	d := SyscallsBetween(syscalls.Reading{ByName: map[string]uint64{"futex": 10, "read": 5}, Total: 40},
		syscalls.Reading{ByName: map[string]uint64{"futex": 25, "read": 5, "write": 3}, Total: 70})
	want := map[string]uint64{"futex": 15, "read": 0, "write": 3}
	if d.Total != 30 || !maps.Equal(d.ByName, want) {
		t.Errorf("got %+v, want %v and total 30", d, want)
	}
}

// TestJoin: two runs of sampling with a gap between them join into one
// window whose counters are the runs' sums, whose span covers the gap,
// whose series follow one another from its start, and whose share of
// readings with reaped children is over both runs' readings; Between
// gives that share over its own readings, not the builder's whole life.
func TestJoin(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }
	run1 := &Window{Start: at(0), End: at(10), UserSec: 1, SysSec: 0.5, RunSec: 1.5, RunKnown: true, VolCtxsw: 100,
		IOCalls: 30, ReadCalls: 20, WriteCalls: 10, ChildrenSeen: 2, intervals: 10, reaps: 5,
		Series: []Point{{T: 10, RSS: 1}}}
	run2 := &Window{Start: at(20), End: at(25), UserSec: 0.5, SysSec: 0.5, RunSec: 1, RunKnown: true, VolCtxsw: 50,
		IOCalls: 3, ReadCalls: 3, ChildrenSeen: 1, intervals: 5, reaps: 0, Comm: "later",
		Series: []Point{{T: 5, RSS: 2}}}
	w := Join(run1, run2)
	if w.Seconds() != 25 || w.CPUSec() != 2.5 || w.RunSec != 2.5 || !w.RunKnown || w.VolCtxsw != 150 ||
		w.IOCalls != 33 || w.ReadCalls != 23 || w.WriteCalls != 10 || w.ChildrenSeen != 3 || w.Comm != "later" {
		t.Errorf("joined: %+v", w)
	}
	if math.Abs(w.ReapShare-5.0/15) > 1e-9 {
		t.Errorf("reap share %v, want 5/15", w.ReapShare)
	}
	if len(w.Series) != 2 || w.Series[0].T != 10 || w.Series[1].T != 25 {
		t.Errorf("series %+v, want points at 10 s and 25 s from the start", w.Series)
	}
	run2.IOCalls = -1
	if w := Join(run1, run2); w.IOCalls != -1 {
		t.Errorf("io unknown in one run: IOCalls %d, want -1", w.IOCalls)
	}
	if Join() != nil {
		t.Error("Join of nothing is not nil")
	}

	earlier := &Window{Start: at(0), End: at(10), intervals: 10, reaps: 10, IOCalls: -1}
	later := &Window{Start: at(0), End: at(20), intervals: 20, reaps: 10, IOCalls: -1}
	if d := Between(earlier, later); d.ReapShare != 0 {
		t.Errorf("Between: reap share %v over ten readings without a reap, want 0", d.ReapShare)
	}
}
