package doctor

import (
	"slices"
	"testing"
)

// TestDifferential checks, on windows built in the test, that each
// picture gets one cause at warn level with its symptoms attached, and
// that contradictions are resolved (a lock-bound program is not a timer
// loop).
func TestDifferential(t *testing.T) {
	host := &Host{CPUs: 2}
	// lockBound is issue 14's program: eight goroutines on one mutex, 45%
	// of a core, 31% of samples in user code, 39,000 futex/s, 15,298
	// wake-ups/s and no netpoll waits.
	lockBound := func(lockShare float64) *Window {
		return win(10, func(w *Window) {
			w.VolCtxsw = 152980
			w.UserSec, w.SysSec = 1.4, 3.1
			w.IOCalls = 5
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 195000, "nanosleep": 30000}}
			w.Stacks = &Stacks{Samples: 400, KernelShare: 0.6,
				Classes:     map[string]float64{ClassUserCode: 0.31, ClassLock: lockShare, ClassScheduler: 0.35},
				KernelPaths: []Share{{Name: "syscall futex", Share: 0.5}, {Name: "syscall nanosleep", Share: 0.1}},
				Sites:       map[string][]Site{ClassLock: {{Func: "main.worker", File: "/src/main.go", Line: 12, Share: lockShare}}}}
		})
	}
	ticker := func(f func(w *Window)) *Window {
		return win(10, func(w *Window) {
			w.VolCtxsw = 20000
			w.UserSec, w.SysSec = 0.06, 0.14
			w.IOCalls = 5
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 9500, "epoll_pwait": 4000, "nanosleep": 500}}
			f(w)
		})
	}
	hot := func(callee string, share float64, leaves ...Share) *Window {
		return win(10, func(w *Window) {
			w.UserSec, w.SysSec = 3, 0.5
			w.Stacks = &Stacks{Samples: 300, Classes: map[string]float64{ClassUserCode: 0.8},
				LibCalls: []LibCall{{Callee: callee, Caller: Site{Func: "main.handle", File: "/src/h.go", Line: 9}, Share: share, Leaves: leaves}}}
		})
	}
	tests := []struct {
		name string
		w    *Window
		// warn is the exact set of warn-level findings; symptoms those
		// attached to the first of them; absent rules found nowhere.
		warn     []string
		symptoms []string
		absent   []string
		code     string
		// top, when set, is the exact set of findings reported on their
		// own at any level.
		top []string
	}{
		{name: "lock-bound: the lock, not a ticker", w: lockBound(0.06),
			warn: []string{"lock-contention"}, symptoms: []string{"scheduler-overhead", "kernel-time"}, absent: []string{"idle-wakeups"}, code: "main.worker"},
		// Its scheduler samples have no program code under them (parked
		// threads): not a herd either, so the futex time in the kernel is
		// what is left to say.
		{name: "lock-bound without lock samples: not a timer loop either", w: lockBound(0),
			absent: []string{"idle-wakeups", "lock-contention"}, warn: []string{"kernel-time"}},
		{name: "1 ms ticker: one cause, the scheduler's share its symptom", w: ticker(func(w *Window) {
			w.UserSec, w.SysSec = 0.1, 0.3
			w.Stacks = &Stacks{Samples: 40, KernelShare: 0.7, Classes: map[string]float64{ClassScheduler: 0.8}}
		}), warn: []string{"idle-wakeups"}, symptoms: []string{"scheduler-overhead"}},
		{name: "ticker wake-ups that run the program's code are work", w: ticker(func(w *Window) {
			w.Stacks = &Stacks{Samples: 40, Classes: map[string]float64{ClassUserCode: 0.6}}
		}), absent: []string{"idle-wakeups"}},
		{name: "leak with the agent: RSS growth is its symptom", w: win(10, func(w *Window) {
			for i := range w.Series {
				w.Series[i].RSS = uint64(10+4*i) << 20
			}
			w.Runtime = nanRuntime()
			w.Runtime.GoroutinesStart, w.Runtime.GoroutinesEnd = 50, 2050
		}), warn: []string{"goroutine-leak"}, symptoms: []string{"memory-growth"}},
		{name: "reopen churn from kernel stacks when syscalls cannot be counted", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.5, 1.7
			w.Stacks = &Stacks{Samples: 200, KernelShare: 0.7, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall openat", Share: 0.16}, {Name: "syscall close", Share: 0.08}, {Name: "syscall fstat", Share: 0.1}, {Name: "syscall read", Share: 0.1}, {Name: "syscall epoll_ctl", Share: 0.1}},
				Sites:       map[string][]Site{"syscall openat": {{Func: "main.poll", File: "/src/p.go", Line: 30, Share: 0.16}}}}
		}), warn: []string{"file-reopen-churn"}, symptoms: []string{"kernel-time"}, code: "main.poll"},
		{name: "reopen churn from a hot os.ReadFile when open and close are barely sampled", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.1, 0.4
			w.Stacks = &Stacks{Samples: 40, KernelShare: 0.7, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall read", Share: 0.3}, {Name: "syscall close", Share: 0.025}},
				Sites:       map[string][]Site{"syscall close": {{Func: "main.poll", File: "/src/p.go", Line: 30, Share: 0.025}}},
				LibCalls:    []LibCall{{Callee: "os.ReadFile", Caller: Site{Func: "main.poll", File: "/src/p.go", Line: 30}, Share: 0.5}}}
		}), warn: nil, top: []string{"file-reopen-churn"}},
		{name: "a hot os.ReadFile whose files are not opened in the window", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.1, 0.4
			w.Stacks = &Stacks{Samples: 40, KernelShare: 0.7, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall read", Share: 0.6}},
				LibCalls:    []LibCall{{Callee: "os.ReadFile", Caller: Site{Func: "main.load", File: "/src/p.go", Line: 9}, Share: 0.6}}}
		}), warn: nil, absent: []string{"file-reopen-churn"}},
		{name: "a server churning connections is not re-opening files", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.5, 1.7
			w.Stacks = &Stacks{Samples: 200, KernelShare: 0.7, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall accept4", Share: 0.1}, {Name: "syscall close", Share: 0.1}, {Name: "syscall epoll_ctl", Share: 0.1}, {Name: "syscall fcntl", Share: 0.05}, {Name: "syscall openat", Share: 0.01}, {Name: "syscall read", Share: 0.2}}}
		}), absent: []string{"file-reopen-churn"}},
		{name: "exec per health check: the hot exec call is its code, not a second finding", w: win(10, func(w *Window) {
			w.ChildUserSec, w.ReapShare = 0.3, 1
			w.UserSec, w.SysSec = 0.2, 0.3
			w.Stacks = &Stacks{Samples: 300, Classes: map[string]float64{ClassUserCode: 0.3},
				LibCalls: []LibCall{{Callee: "os/exec.(*Cmd).Output", Caller: Site{Func: "main.probeClock", File: "/src/check.go", Line: 17}, Share: 0.4}}}
		}), warn: []string{"exec-hot-path"}, symptoms: []string{"kernel-time", "cpu-hotspot"}},
		{name: "futex storm from kernel stacks", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.5, 1.5
			w.Stacks = &Stacks{Samples: 200, KernelShare: 0.75, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall futex", Share: 0.6}, {Name: "syscall read", Share: 0.1}}}
		}), warn: []string{"kernel-time"}},
		{name: "kernel stacks of I/O are not churn", w: win(10, func(w *Window) {
			w.UserSec, w.SysSec = 0.5, 1.5
			w.Stacks = &Stacks{Samples: 200, KernelShare: 0.75, Classes: map[string]float64{ClassUserCode: 0.2},
				KernelPaths: []Share{{Name: "syscall read", Share: 0.4}, {Name: "syscall write", Share: 0.3}}}
		}), warn: nil},
		{name: "regexp compiled per request", w: hot("regexp.MustCompile", 0.4), warn: []string{"cpu-hotspot"}, code: "main.handle"},
		{name: "hashing is the job: info", w: hot("crypto/sha256.Sum256", 0.9), warn: nil},
		{name: "fmt is needed work: info", w: hot("fmt.Sprintf", 0.4), warn: nil},
		{name: "a replaceable codec holding most of the CPU", w: hot("encoding/json.Unmarshal", 0.6), warn: []string{"cpu-hotspot"}, code: "main.handle"},
		{name: "large buffers cleared per call", w: hot("runtime.makeslice", 0.3, Share{Name: "runtime.memclrNoHeapPointers", Share: 0.7}), warn: []string{"cpu-hotspot"}},
		{name: "makeslice that is not clearing memory", w: hot("runtime.makeslice", 0.3, Share{Name: "runtime.mallocgc", Share: 0.7}), warn: nil},
		// Compiling per call is waste at any share that is not noise: an
		// unseen server parsed a small template per request under 11%
		// of its samples.
		{name: "compiling per call from a tenth of the CPU", w: hot("regexp.MustCompile", 0.2), warn: []string{"cpu-hotspot"}},
		{name: "compiling per call below a tenth of the CPU", w: hot("regexp.MustCompile", 0.08), warn: nil},
		{name: "fmt below a quarter of the CPU", w: hot("fmt.Sprintf", 0.2), warn: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, _ := Evaluate(tt.w, host)
			if got := warnIDs(found); !slices.Equal(got, tt.warn) {
				t.Fatalf("warn-level findings %v, want %v:%s", got, tt.warn, describe(found))
			}
			if len(tt.warn) > 0 {
				var f *Finding
				for i := range found {
					if found[i].ID == tt.warn[0] {
						f = &found[i]
					}
				}
				var got []string
				for _, s := range f.Symptoms {
					got = append(got, s.ID)
				}
				if !slices.Equal(got, tt.symptoms) {
					t.Errorf("%s explains %v, want %v", f.ID, got, tt.symptoms)
				}
				if tt.code != "" && (len(f.Code) == 0 || f.Code[0].Func != tt.code || f.Code[0].Line == 0) {
					t.Errorf("%s names code %v, want %s with its line", f.ID, f.Code, tt.code)
				}
			}
			if tt.top != nil {
				var top []string
				for _, f := range found {
					top = append(top, f.ID)
				}
				if !slices.Equal(top, tt.top) {
					t.Errorf("findings %v, want %v:%s", top, tt.top, describe(found))
				}
			}
			for _, f := range flatten(found) {
				if slices.Contains(tt.absent, f.ID) {
					t.Errorf("%s found (%s), want it nowhere", f.ID, f.Title)
				}
			}
		})
	}
}

// TestReopenExplainsItsHotCall: with syscall counts, the reopen churn
// names the hot os.ReadFile call as its code, and the call is not a
// second finding.
func TestReopenExplainsItsHotCall(t *testing.T) {
	w := win(10, func(w *Window) {
		w.UserSec, w.SysSec = 0.2, 0.8
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 13000, "close": 13000, "read": 26000, "fcntl": 26000}}
		w.Stacks = &Stacks{Samples: 60, KernelShare: 0.7, Classes: map[string]float64{ClassUserCode: 0.1},
			LibCalls: []LibCall{{Callee: "os.ReadFile", Caller: Site{Func: "main.poll", File: "/src/p.go", Line: 30}, Share: 0.45}}}
	})
	found, _ := Evaluate(w, &Host{CPUs: 2})
	if len(found) != 1 || found[0].ID != "file-reopen-churn" {
		t.Fatalf("want only file-reopen-churn:%s", describe(found))
	}
	f := found[0]
	var ids []string
	for _, s := range f.Symptoms {
		ids = append(ids, s.ID)
	}
	if !slices.Contains(ids, "cpu-hotspot") || !slices.Contains(ids, "kernel-time") {
		t.Errorf("symptoms %v, want cpu-hotspot and kernel-time", ids)
	}
	if len(f.Code) == 0 || f.Code[0].Func != "main.poll" || f.Code[0].Line != 30 {
		t.Errorf("code %v, want main.poll at line 30", f.Code)
	}
}

// TestLockFromHandoffs: a small share of lock samples decides with futex
// handoffs and no netpoll waits, unless the scheduler's share dominates
// (a herd that takes a mutex on its way).
func TestLockFromHandoffs(t *testing.T) {
	w := func(lock, sched float64, counts map[string]uint64) *Window {
		return win(10, func(w *Window) {
			w.UserSec, w.SysSec = 8, 1
			w.VolCtxsw = 60000
			w.IOCalls = 5
			w.Syscalls = &Syscalls{Seconds: 5, Counts: counts}
			w.Stacks = &Stacks{Samples: 800, Classes: map[string]float64{ClassLock: lock, ClassScheduler: sched, ClassUserCode: 0.85}}
		})
	}
	handoffs := map[string]uint64{"futex": 25000, "nanosleep": 10000}
	for _, tc := range []struct {
		name string
		w    *Window
		want bool
	}{
		{"handoffs and 2% lock samples", w(0.02, 0.05, handoffs), true},
		{"no syscall counts", w(0.02, 0.05, nil), false},
		{"futex with netpoll waits (timers, I/O)", w(0.02, 0.05, map[string]uint64{"futex": 25000, "epoll_pwait": 12000}), false},
		{"a herd: the scheduler dominates", w(0.02, 0.5, handoffs), false},
		{"a lock frame or two", w(0.002, 0.05, handoffs), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no syscall counts" {
				tc.w.Syscalls = nil
			}
			found, _ := Evaluate(tc.w, &Host{CPUs: 2})
			got := slices.ContainsFunc(found, func(f Finding) bool { return f.ID == "lock-contention" })
			if got != tc.want {
				t.Errorf("lock-contention %v, want %v:%s", got, tc.want, describe(found))
			}
		})
	}
}

// TestLockExplainsTheWorkUnderIt: a hot call made where the contended lock
// is taken is the slow work held under the lock, not a second cause; a hot
// call elsewhere stays a finding of its own.
func TestLockExplainsTheWorkUnderIt(t *testing.T) {
	for _, tc := range []struct {
		caller string
		want   []string
	}{
		{"main.(*logger).printf", []string{"lock-contention"}},
		{"main.render", []string{"cpu-hotspot", "lock-contention"}},
	} {
		w := win(10, func(w *Window) {
			w.UserSec = 9
			w.Stacks = &Stacks{Samples: 800, Classes: map[string]float64{ClassLock: 0.06, ClassUserCode: 0.9},
				Sites:    map[string][]Site{ClassLock: {{Func: "main.(*logger).printf", File: "/src/log.go", Line: 79, Share: 0.06}}},
				LibCalls: []LibCall{{Callee: "fmt.Fprintf", Caller: Site{Func: tc.caller, File: "/src/log.go", Line: 81}, Share: 0.55}}}
		})
		found, _ := Evaluate(w, &Host{CPUs: 2})
		if got := warnIDs(found); !slices.Equal(got, tc.want) {
			t.Errorf("hot call from %s: warn %v, want %v:%s", tc.caller, got, tc.want, describe(found))
		}
	}
}

// TestHerdExplainsItsLockWaits: a herd woken together takes a mutex on its
// way; when the code waking it holds at least the lock's share of samples
// the herd is the cause, else the lock is.
func TestHerdExplainsItsLockWaits(t *testing.T) {
	for _, tc := range []struct {
		// waker is the share of samples under the program's code waking
		// goroutines outside a lock.
		sched, lock, waker float64
		want               string
	}{
		{0.58, 0.026, 0.30, "scheduler-overhead"},
		// A lock-bound program's parked threads are scheduler samples
		// too, without program frames.
		{0.58, 0.06, 0, "lock-contention"},
		{0.35, 0.06, 0.01, "lock-contention"},
	} {
		w := win(10, func(w *Window) {
			w.UserSec = 1.5
			w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassScheduler: tc.sched, ClassLock: tc.lock, ClassUserCode: 0.3}}
			if tc.waker > 0 {
				w.Stacks.Sites = map[string][]Site{ClassScheduler: {{Func: "main.broadcast", File: "/src/b.go", Line: 9, Share: tc.waker}}}
			}
			w.Runtime = nanRuntime()
			w.Runtime.MutexWaitPerSec = 0.33
		})
		found, _ := Evaluate(w, &Host{CPUs: 2})
		if got := warnIDs(found); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("scheduler %.0f%%, lock %.0f%%: warn %v, want [%s]:%s", 100*tc.sched, 100*tc.lock, got, tc.want, describe(found))
		}
	}
}
