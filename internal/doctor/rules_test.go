package doctor

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/window"
)

// win builds a window of sec seconds for rule tests.
func win(sec float64, f func(w *Window)) *Window {
	t0 := time.Unix(1000, 0)
	w := &Window{PID: 42, Comm: "svc", GoVersion: "go1.26.8", Start: t0,
		End: t0.Add(time.Duration(sec * float64(time.Second))), IOCalls: -1, FDsKnown: true, FDLimit: 1 << 20, AllowedCPUs: 2}
	for i := 0; i <= int(sec); i++ {
		w.Series = append(w.Series, Point{T: float64(i), RSS: 10 << 20, FDs: 10, Threads: 6})
	}
	f(w)
	return w
}

func nanRuntime() *Runtime {
	n := math.NaN()
	return &Runtime{From: "agent", Seconds: 10, GoroutinesStart: n, GoroutinesEnd: n, GCCPUShare: n, AssistShare: n, SchedLatP99: n, MutexWaitPerSec: n, HeapLive: n, HeapObjects: n}
}

func TestRules(t *testing.T) {
	host := &Host{CPUs: 2}
	tests := []struct {
		name string
		w    *Window
		rule string
		want Severity // -1: must not fire
	}{
		{"ticker fires", win(10, func(w *Window) { w.VolCtxsw = 20000; w.UserSec, w.SysSec = 0.06, 0.14; w.IOCalls = 5 }), "idle-wakeups", Warn},
		{"10ms ticker is info", win(10, func(w *Window) { w.VolCtxsw = 2000; w.SysSec = 0.02; w.IOCalls = 0 }), "idle-wakeups", Info},
		{"busy server is work", win(10, func(w *Window) { w.VolCtxsw = 25000; w.UserSec, w.SysSec = 0.3, 0.6; w.IOCalls = 40000 }), "idle-wakeups", -1},
		{"no io counters, costly wake-ups", win(10, func(w *Window) { w.VolCtxsw = 25000; w.UserSec, w.SysSec = 0.3, 0.6 }), "idle-wakeups", -1},
		{"quiet process", win(10, func(w *Window) { w.VolCtxsw = 50 }), "idle-wakeups", -1},
		{"timer syscalls raise confidence", win(10, func(w *Window) {
			w.VolCtxsw = 20000
			w.SysSec = 0.1
			w.IOCalls = 0
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 9500, "epoll_pwait": 4000, "nanosleep": 500}}
		}), "idle-wakeups", Warn},

		{"kernel-heavy io is info", win(10, func(w *Window) { w.UserSec, w.SysSec = 0.3, 0.7 }), "kernel-time", Info},
		{"kernel-heavy futex is warn", win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.3, 0.7
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 50000, "read": 1000}}
		}), "kernel-time", Warn},
		{"user-heavy", win(10, func(w *Window) { w.UserSec, w.SysSec = 0.9, 0.1 }), "kernel-time", -1},
		{"too little cpu to matter", win(10, func(w *Window) { w.UserSec, w.SysSec = 0.01, 0.2 }), "kernel-time", -1},

		{"reopen churn", win(10, func(w *Window) {
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 50000, "close": 50000, "fstat": 50000}}
		}), "file-reopen-churn", Warn},
		{"opens of exec'd children are not churn", win(10, func(w *Window) {
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 1100, "close": 1500, "wait4": 250}}
		}), "file-reopen-churn", -1},
		{"opens that leak are not churn", win(10, func(w *Window) {
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 5000, "close": 4800}}
			w.Series[len(w.Series)-1].FDs = 2000
		}), "file-reopen-churn", -1},

		// Without syscall counts, kernel stack samples decide. A reading
		// taken while the file is open sees one descriptor more: churn
		// still (a CI run lost its finding so), a steady rise a leak.
		{"reopen from stacks, a reading mid-open", win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.4, 0.9
			w.Stacks = &Stacks{Samples: 900, KernelShare: 0.7, KernelPaths: []Share{{Name: "syscall openat", Share: 0.15}, {Name: "syscall fcntl", Share: 0.08}, {Name: "syscall close", Share: 0.04}}}
			w.Series[len(w.Series)-1].FDs++
		}), "file-reopen-churn", Warn},
		{"reopen from stacks, leaking", win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.4, 0.9
			w.Stacks = &Stacks{Samples: 900, KernelShare: 0.7, KernelPaths: []Share{{Name: "syscall openat", Share: 0.15}, {Name: "syscall fcntl", Share: 0.08}, {Name: "syscall close", Share: 0.04}}}
			w.Series[len(w.Series)-1].FDs += 300
		}), "file-reopen-churn", -1},

		{"exec per request", win(10, func(w *Window) { w.ChildUserSec = 0.3; w.ReapShare = 1 }), "exec-hot-path", Warn},
		{"exec counted by wait4", win(10, func(w *Window) {
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"wait4": 250}}
		}), "exec-hot-path", Warn},
		{"one long child finished", win(10, func(w *Window) { w.ChildUserSec = 4; w.ReapShare = 0.1 }), "exec-hot-path", -1},

		{"fds near limit", win(10, func(w *Window) { w.FDLimit = 1024; w.Series[3].FDs = 900 }), "fd-limit", Warn},
		{"fds at limit", win(10, func(w *Window) { w.FDLimit = 1024; w.Series[3].FDs = 1000 }), "fd-limit", Critical},
		{"unlimited", win(10, func(w *Window) { w.FDLimit = -1; w.Series[3].FDs = 1000 }), "fd-limit", -1},

		{"fd leak", win(10, func(w *Window) {
			for i := range w.Series {
				w.Series[i].FDs = int32(10 + 20*i)
			}
		}), "fd-leak", Warn},
		{"fd leak near limit", win(10, func(w *Window) {
			w.FDLimit = 1000
			for i := range w.Series {
				w.Series[i].FDs = int32(10 + 20*i)
			}
		}), "fd-leak", Critical},
		{"fds jitter", win(10, func(w *Window) {
			for i := range w.Series {
				w.Series[i].FDs = int32(10 + 15*(i%2))
			}
		}), "fd-leak", -1},

		{"memory grows", win(10, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(10+4*i) << 20
			}
		}), "memory-growth", Warn},
		{"memory flat", win(10, func(w *Window) {}), "memory-growth", -1},
		{"slow growth in a short window may be warm-up", win(8, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(32<<20) + uint64(i)*(750<<10)
			}
		}), "memory-growth", Info},
		{"slow growth over a long window", win(60, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(32<<20) + uint64(i)*(750<<10)
			}
		}), "memory-growth", Warn},
		{"RSS filling the GC's headroom, the live heap steady", win(4, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(35+9*i) << 20
			}
			w.Runtime = nanRuntime()
			w.Runtime.Books = &window.Books{Seconds: 4,
				Start: window.BookGC{Cycles: 50, HeapMarked: 27 << 20, HeapGoal: 54 << 20, StackInUse: 1 << 20},
				End:   window.BookGC{Cycles: 140, HeapMarked: 28 << 20, HeapGoal: 56 << 20, StackInUse: 1 << 20}}
		}), "memory-growth", Info},
		{"the live heap grows with RSS", win(4, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(35+9*i) << 20
			}
			w.Runtime = nanRuntime()
			w.Runtime.Books = &window.Books{Seconds: 4,
				Start: window.BookGC{Cycles: 50, HeapMarked: 17 << 20, HeapGoal: 34 << 20, StackInUse: 1 << 20},
				End:   window.BookGC{Cycles: 60, HeapMarked: 35 << 20, HeapGoal: 70 << 20, StackInUse: 1 << 20}}
		}), "memory-growth", Warn},
		{"RSS past what the heap goal explains (memory outside the Go heap)", win(4, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(100+40*i) << 20
			}
			w.Runtime = nanRuntime()
			w.Runtime.Books = &window.Books{Seconds: 4,
				Start: window.BookGC{Cycles: 50, HeapMarked: 27 << 20, HeapGoal: 54 << 20, StackInUse: 1 << 20},
				End:   window.BookGC{Cycles: 140, HeapMarked: 28 << 20, HeapGoal: 56 << 20, StackInUse: 1 << 20}}
		}), "memory-growth", Warn},
		{"memory warming up", win(10, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(10+30*min(i, 4)+i/4) << 20
			}
		}), "memory-growth", -1},

		{"threads explode", win(10, func(w *Window) { w.Series[5].Threads = 302 }), "thread-explosion", Critical},
		{"threads high", win(10, func(w *Window) { w.Series[5].Threads = 60 }), "thread-explosion", Warn},
		{"threads normal", win(10, func(w *Window) { w.Series[5].Threads = 12 }), "thread-explosion", -1},
		{"non-Go threads", win(10, func(w *Window) { w.GoVersion = ""; w.Series[5].Threads = 302 }), "thread-explosion", -1},

		{"gomaxprocs above cpus", win(10, func(w *Window) { w.Go = &GoFacts{GOMAXPROCS: 16, GOMAXPROCSFrom: "environ"} }), "gomaxprocs-oversized", Critical},
		{"gomaxprocs default", win(10, func(w *Window) { w.Go = &GoFacts{GOMAXPROCS: 2, GOMAXPROCSFrom: "computed"} }), "gomaxprocs-oversized", -1},
		{"gomaxprocs idle many-core", win(10, func(w *Window) {
			w.AllowedCPUs = 64
			w.Go = &GoFacts{GOMAXPROCS: 64}
			w.VolCtxsw = 5000
			w.UserSec = 0.1
		}), "gomaxprocs-oversized", Info},

		{"gc from runtime", win(10, func(w *Window) {
			w.UserSec = 5
			w.Runtime = nanRuntime()
			w.Runtime.GCCycles, w.Runtime.GCCPUShare = 20, 0.39
		}), "gc-pressure", Warn},
		{"gc from stacks", win(10, func(w *Window) {
			w.UserSec = 5
			w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassGCBackground: 0.25, ClassGCAssist: 0.1}}
		}), "gc-pressure", Warn},
		{"gc normal", win(10, func(w *Window) {
			w.UserSec = 5
			w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassGCBackground: 0.08}}
		}), "gc-pressure", -1},
		{"assist", win(10, func(w *Window) {
			w.UserSec = 5
			w.Runtime = nanRuntime()
			w.Runtime.AssistShare = 0.11
		}), "gc-assist", Warn},
		{"scheduler share", win(10, func(w *Window) {
			w.UserSec = 2
			w.VolCtxsw = 1000 // 0.07 cores over 100 wake-ups a second: 700 us each
			w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassScheduler: 0.35}}
		}), "scheduler-overhead", Warn},
		// The same share over 4,000 thread wake-ups a second is 17.5 us
		// per wake-up: the cost of waking, as in a server with light
		// requests, not a herd.
		{"scheduler share that waking explains", win(10, func(w *Window) {
			w.UserSec = 2
			w.VolCtxsw = 40000
			w.Stacks = &Stacks{Samples: 500, Classes: map[string]float64{ClassScheduler: 0.35}}
		}), "scheduler-overhead", Info},
		{"sched latency", win(10, func(w *Window) {
			w.UserSec = 2
			w.Runtime = nanRuntime()
			w.Runtime.SchedLatP99 = 0.03
		}), "scheduler-overhead", Warn},
		{"sched latency from a starved host", win(10, func(w *Window) {
			w.UserSec = 2
			w.RunQueueSec = 3
			w.Runtime = nanRuntime()
			w.Runtime.SchedLatP99 = 0.08
		}), "scheduler-overhead", -1},
		{"mutex wait", win(10, func(w *Window) {
			w.Runtime = nanRuntime()
			w.Runtime.MutexWaitPerSec = 1.2
		}), "lock-contention", Warn},
		{"goroutines rise", win(10, func(w *Window) {
			w.Runtime = nanRuntime()
			w.Runtime.GoroutinesStart, w.Runtime.GoroutinesEnd = 50, 1050
		}), "goroutine-leak", Warn},
		{"an old leak still rising fast", win(10, func(w *Window) {
			w.Runtime = nanRuntime()
			w.Runtime.GoroutinesStart, w.Runtime.GoroutinesEnd = 6000, 8000
		}), "goroutine-leak", Warn},
		{"many goroutines, a little churn", win(10, func(w *Window) {
			w.Runtime = nanRuntime()
			w.Runtime.GoroutinesStart, w.Runtime.GoroutinesEnd = 100000, 100500
		}), "goroutine-leak", -1},
		{"goroutines steady", win(10, func(w *Window) {
			w.Runtime = nanRuntime()
			w.Runtime.GoroutinesStart, w.Runtime.GoroutinesEnd = 5000, 5020
		}), "goroutine-leak", -1},
		{"json hotspot", win(10, func(w *Window) {
			w.UserSec = 5
			w.Stacks = &Stacks{Samples: 500, Packages: []Share{{Name: "runtime", Share: 0.4}, {Name: "encoding/json", Share: 0.35}}, Functions: []Share{{Name: "encoding/json.(*decodeState).object", Share: 0.2}}}
		}), "cpu-hotspot", Info},
		{"spread out", win(10, func(w *Window) {
			w.UserSec = 5
			w.Stacks = &Stacks{Samples: 500, Packages: []Share{{Name: "main", Share: 0.2}, {Name: "net/http", Share: 0.2}}}
		}), "cpu-hotspot", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { ruleSeverity(t, tt.w, host, tt.rule, tt.want) })
	}
}

// ruleSeverity evaluates w and fails unless rule fired at severity want
// (-1: did not fire); it returns the finding.
func ruleSeverity(t *testing.T, w *Window, host *Host, rule string, want Severity) *Finding {
	t.Helper()
	found, _ := Evaluate(w, host)
	var got *Finding
	for i := range found {
		if found[i].ID == rule {
			got = &found[i]
		}
	}
	switch {
	case want < 0 && got != nil:
		t.Fatalf("%s fired (%s: %s), want nothing", rule, got.Severity, got.Title)
	case want >= 0 && got == nil:
		t.Fatalf("%s did not fire; found %s", rule, describe(found))
	case got != nil && got.Severity != want:
		t.Fatalf("%s severity %s, want %s (%s: %s)", rule, got.Severity, want, got.Title, got.Cause)
	}
	return got
}

func TestMissingSources(t *testing.T) {
	w := win(10, func(w *Window) {})
	_, un := Evaluate(w, &Host{CPUs: 2})
	got := map[string]bool{}
	for _, u := range un {
		got[u.Rule] = true
		if u.Why == "" {
			t.Errorf("%s unchecked without a reason", u.Rule)
		}
	}
	for _, id := range []string{"file-reopen-churn", "gc-pressure", "gc-assist", "goroutine-leak", "cpu-hotspot", "scheduler-overhead", "lock-contention"} {
		if !got[id] {
			t.Errorf("%s not listed as unchecked on a /proc-only window", id)
		}
	}
	for _, id := range []string{"idle-wakeups", "fd-limit", "memory-growth"} {
		if got[id] {
			t.Errorf("%s listed as unchecked though /proc decides it", id)
		}
	}
}

func TestSlope(t *testing.T) {
	b, r2 := slope([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	if math.Abs(b-2) > 1e-9 || math.Abs(r2-1) > 1e-9 {
		t.Fatalf("slope %v r2 %v, want 2 and 1", b, r2)
	}
	if b, r2 := slope([]float64{0, 1, 2}, []float64{5, 5, 5}); b != 0 || r2 != 0 {
		t.Fatalf("flat: slope %v r2 %v", b, r2)
	}
}

// TestExecTitle: a rate of children counted from /proc readings alone is a
// floor (a child that lives less than an interval is rarely in one), and
// the title says so; a rate of reaping calls is a count.
func TestExecTitle(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    *Window
		want string
	}{
		{"counted by wait4", win(10, func(w *Window) {
			w.ChildrenSeen = 14
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"wait4": 500}}
		}), "starts 100.0 child processes a second"},
		{"seen in readings, steady", win(30, func(w *Window) { w.ChildrenSeen = 42; w.ChildSysSec = 1; w.ReapShare = 1 }),
			"children started and reaped all the time use 3.3% of a core (at least 1.4 a second)"},
		{"seen in readings", win(10, func(w *Window) { w.ChildrenSeen = 20 }), "starts at least 2.0 child processes a second"},
		{"too few seen, steady", win(10, func(w *Window) { w.ChildrenSeen = 3; w.ChildUserSec = 0.3; w.ReapShare = 1 }),
			"children started and reaped all the time use 3.0% of a core"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkExec(tc.w, &Host{CPUs: 2})
			if f == nil {
				t.Fatal("no finding")
			}
			if f.Title != tc.want {
				t.Errorf("title %q, want %q", f.Title, tc.want)
			}
		})
	}
}

func TestRuleIDsStable(t *testing.T) {
	want := []string{"connection-churn", "cpu-hotspot", "exec-hot-path", "fd-leak", "fd-limit", "file-reopen-churn", "gc-assist", "gc-pressure",
		"gomaxprocs-oversized", "goroutine-churn", "goroutine-leak", "goroutine-memory", "heap-holders", "idle-wakeups", "kernel-time",
		"lock-contention", "memory-growth", "scheduler-overhead", "thread-explosion"}
	rs := Rules()
	if len(rs) != len(want) {
		t.Fatalf("%d rules, want %d", len(rs), len(want))
	}
	for i, r := range rs {
		if r.ID != want[i] || r.Summary == "" {
			t.Errorf("rule %d = %q (%q), want %q with a summary", i, r.ID, r.Summary, want[i])
		}
	}
}

// TestUncheckedReasonsFitPrivilege: as root, a rule left undecided never
// tells the user to run as root; without root it does.
func TestUncheckedReasonsFitPrivilege(t *testing.T) {
	w := win(10, func(w *Window) {})
	for _, root := range []bool{false, true} {
		_, un := Evaluate(w, &Host{CPUs: 2, Root: root})
		if len(un) == 0 {
			t.Fatal("nothing left undecided on a window without syscalls or stacks")
		}
		says := 0
		for _, u := range un {
			if strings.Contains(u.Why, "run as root") {
				says++
				if root {
					t.Errorf("as root, %s: %q", u.Rule, u.Why)
				}
			}
		}
		if !root && says == 0 {
			t.Errorf("without root no reason says how to get stacks or syscalls: %+v", un)
		}
	}
}

// TestSchedulerShareNeedsSamples: a third of 30 samples in the scheduler
// (an I/O server at 10% of a core) is not a herd; half of 60 at 16% is.
func TestSchedulerShareNeedsSamples(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	win := func(cpuSec float64, samples int, share float64) *Window {
		return &Window{PID: 9, Comm: "srv", GoVersion: "go1.26.8", Start: t0, End: t0.Add(4 * time.Second),
			UserSec: cpuSec, IOCalls: -1, Series: []Point{{T: 0, Threads: 6}, {T: 4, Threads: 6}},
			Stacks: &Stacks{Samples: samples, Classes: map[string]float64{ClassScheduler: share}}}
	}
	h := &Host{CPUs: 2}
	if f := checkScheduler(win(0.38, 30, 1.0/3), h); f != nil {
		t.Errorf("10 of 30 samples in the scheduler at 9.5%% of a core: %s", f.Title)
	}
	if f := checkScheduler(win(0.63, 62, 0.52), h); f == nil {
		t.Errorf("32 of 62 samples in the scheduler at 16%% of a core: no finding")
	}
}

func TestTopSyscalls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts map[string]uint64
		n      int
		want   string
	}{
		{"no tie", map[string]uint64{"futex": 50, "read": 30, "write": 20}, 2, "futex 50%, read 30%"},
		// The reopen patient: openat tied with close, fstat and epoll_ctl
		// at the cut, and alphabetically last of them.
		{"tie at the cut", map[string]uint64{"futex": 40, "read": 25, "close": 8, "epoll_ctl": 8, "fstat": 8, "openat": 8, "write": 3}, 3,
			"futex 40%, read 25%, close 8%, epoll_ctl 8%, fstat 8%, openat 8%"},
		{"tie above the cut only", map[string]uint64{"a": 30, "b": 30, "c": 20, "d": 20}, 1, "a 30%, b 30%"},
		{"ties capped at twice n", map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, 2, "a 20%, b 20%, c 20%, d 20%"},
		{"fewer than n", map[string]uint64{"futex": 1}, 5, "futex 100%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := topSyscalls(&Syscalls{Counts: tc.counts}, tc.n); got != tc.want {
				t.Errorf("topSyscalls = %q, want %q", got, tc.want)
			}
		})
	}
}
