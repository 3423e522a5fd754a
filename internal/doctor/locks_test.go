package doctor

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestLocksFromParks checks lock-contention on windows built in the test:
// from outside, probes counting goroutines that park on sync mutexes
// decide in place of stack samples, judged on how often they park and
// how dense the parks are in the work; the runtime's own wait time is
// preferred when present.
func TestLocksFromParks(t *testing.T) {
	host := &Host{CPUs: 2}
	probes := func(calls map[string]ProbeCalls) *Probes {
		return &Probes{Seconds: 2, Calls: calls, Mechanism: "test"}
	}
	touch := Site{Func: "example.com/store.(*Store).Touch", File: "/src/store.go", Line: 26, Share: 1}
	hits := Site{Func: "example.com/store.(*Store).Hits", File: "/src/store.go", Line: 43, Share: 1}
	const rw = 0xc000120000
	// A WaitGroup fan-out's wg.Done and wg.Wait on CPU read as lock-class
	// samples, and its channel handoffs as futex wake-ups: enough for the
	// stack path's weak rule (a false warning seen on a judge's patient).
	fanoutStacks := func(w *Window) {
		w.UserSec = 0.6
		w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassLock: 0.035, ClassScheduler: 0.05, ClassUserCode: 0.7},
			Sites: map[string][]Site{ClassLock: {{Func: "main.(*shard).run", File: "/src/main.go", Line: 22, Share: 0.035}}}}
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 15000, "nanosleep": 100}}
	}
	tests := []struct {
		name string
		w    *Window
		warn bool
		// code is the first code named, from codeFrom; evidence a piece
		// of the evidence the finding must hold.
		code, codeFrom, evidence string
	}{
		{name: "RWMutex map: writers' parks too hot to sample, readers' and writers' waits named", w: win(10, func(w *Window) {
			w.UserSec = 6.3
			w.Stacks = &Stacks{Samples: 1200, Classes: map[string]float64{ClassLock: 0.04, ClassUserCode: 0.8},
				Sites: map[string][]Site{ClassLock: {{Func: touch.Func, File: touch.File, Line: 26, Share: 0.03}}}}
			w.Probes = probes(map[string]ProbeCalls{
				"preflight:sync.runtime_SemacquireMutex": {Count: 18000},
				"sync.runtime_SemacquireRWMutexR":        {Count: 3200, Callers: []Site{hits}, Args: []ProbeArg{{Value: rw + 12, Share: 1}}},
				"sync.runtime_SemacquireRWMutex":         {Count: 2000, Callers: []Site{touch}, Args: []ProbeArg{{Value: rw + 8, Share: 1}}},
			})
		}), warn: true, code: hits.Func, codeFrom: "probes", evidence: "mutex the mutex at 0xc000120000"},
		{name: "plain Mutex, every park sampled", w: win(10, func(w *Window) {
			w.UserSec = 7
			w.Probes = probes(map[string]ProbeCalls{
				"sync.runtime_SemacquireMutex":          {Count: 15000, Callers: []Site{{Func: "main.(*ledger).append", File: "/src/l.go", Line: 30, Share: 1}}, Args: []ProbeArg{{Value: 0x5f8ed8 + 4, Share: 1}}},
				"internal/sync.runtime_SemacquireMutex": {Count: 15000, Callers: []Site{{Func: "main.(*ledger).append", File: "/src/l.go", Line: 30, Share: 1}}, Args: []ProbeArg{{Value: 0x5f8ed8 + 4, Share: 1}}},
			})
		}), warn: true, code: "main.(*ledger).append", codeFrom: "probes", evidence: "mutex_parks_per_s 7500 /s"},
		{name: "parks too hot to probe throughout, sampled in bursts: their callers named, the duty stated", w: win(10, func(w *Window) {
			w.UserSec = 11
			w.Probes = probes(map[string]ProbeCalls{
				"sync.runtime_SemacquireMutex": {Count: 24000, Duty: 0.18, Callers: []Site{{Func: "main.contend", File: "/src/c.go", Line: 78, Share: 1}}, Args: []ProbeArg{{Value: 0x5e7c88 + 4, Share: 1}}},
			})
		}), warn: true, code: "main.contend", codeFrom: "probes", evidence: "parks_sampled in bursts attached 18% of the window"},
		{name: "a lock held across I/O: few parks, but dense in little CPU", w: win(10, func(w *Window) {
			w.UserSec = 0.5
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 1600, Callers: []Site{{Func: "main.flush", Share: 1}}}})
		}), warn: true, code: "main.flush", codeFrom: "probes"},
		{name: "WaitGroup fan-out with probes: no goroutine parks on a mutex", w: win(10, func(w *Window) {
			fanoutStacks(w)
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {}, "sync.runtime_SemacquireRWMutexR": {}, "sync.runtime_SemacquireRWMutex": {}})
		})},
		{name: "cache server at 1,000 req/s: a park a second", w: win(10, func(w *Window) {
			w.UserSec = 0.5
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 2, Callers: []Site{{Func: "main.cacheHandler", Share: 1}}}})
		})},
		{name: "busy server: frequent parks, sparse in much work", w: win(10, func(w *Window) {
			w.UserSec = 16
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 1400}})
		})},
		{name: "an idle program's rare park is not dense enough to matter", w: win(10, func(w *Window) {
			w.UserSec = 0.01
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 20}})
		})},
		{name: "the runtime's wait time is preferred: short waits", w: win(10, func(w *Window) {
			w.UserSec = 5
			w.Runtime = nanRuntime()
			w.Runtime.MutexWaitPerSec = 0.01
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 20000}})
		})},
		{name: "the runtime's wait time is preferred: long waits", w: win(10, func(w *Window) {
			w.UserSec = 5
			w.Runtime = nanRuntime()
			w.Runtime.MutexWaitPerSec = 0.8
			w.Probes = probes(map[string]ProbeCalls{"sync.runtime_SemacquireMutex": {Count: 40, Callers: []Site{{Func: "main.work", Share: 1}}}})
		}), warn: true, code: "main.work", codeFrom: "probes"},
		{name: "park functions absent from the binary: the stack samples decide", w: win(10, func(w *Window) {
			w.UserSec = 6
			w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassLock: 0.06, ClassUserCode: 0.8},
				Sites: map[string][]Site{ClassLock: {{Func: "main.worker", File: "/src/w.go", Line: 9, Share: 0.06}}}}
			w.Probes = probes(map[string]ProbeCalls{"time.Sleep": {Count: 4}})
		}), warn: true, code: "main.worker", codeFrom: "stack samples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := checkLocks(tt.w, host)
			if (f != nil) != tt.warn {
				t.Fatalf("lock-contention %v, want %v: %+v", f != nil, tt.warn, f)
			}
			if f == nil {
				return
			}
			for _, e := range f.Evidence {
				if x, ok := e.Value.(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
					t.Errorf("evidence %s = %v", e.Name, x)
				}
			}
			if tt.code != "" && (len(f.Code) == 0 || f.Code[0].Func != tt.code || f.Code[0].From != tt.codeFrom) {
				t.Errorf("code %+v, want %s from %s first", f.Code, tt.code, tt.codeFrom)
			}
			if !strings.Contains(evidenceText(f.Evidence), tt.evidence) {
				t.Errorf("evidence %q lacks %q", evidenceText(f.Evidence), tt.evidence)
			}
			if tt.w.Probes != nil && tt.codeFrom == "probes" && !slices.Contains(f.Sources, SourceProbes) {
				t.Errorf("sources %v lack probes", f.Sources)
			}
		})
	}
}

// TestLockParksSumsOneNamePerKind: a function under the name asked for
// and under the binary's own name is counted once, and the writer's
// parks on an RWMutex's inner Mutex, its wait for readers and a reader's
// wait all name the RWMutex.
func TestLockParksSumsOneNamePerKind(t *testing.T) {
	const rw = 0xc000120000
	w := win(10, func(w *Window) {
		w.UserSec = 10
		w.Probes = &Probes{Seconds: 2, Calls: map[string]ProbeCalls{
			"sync.runtime_SemacquireMutex":          {Count: 4000, Args: []ProbeArg{{Value: rw + 4, Share: 1}}},
			"internal/sync.runtime_SemacquireMutex": {Count: 4000, Args: []ProbeArg{{Value: rw + 4, Share: 1}}},
			"sync.runtime_SemacquireRWMutexR":       {Count: 1000, Args: []ProbeArg{{Value: rw + 12, Share: 0.5}, {Value: 0x1000 + 12, Share: 0.5}}},
			"sync.runtime_SemacquireRWMutex":        {Count: 1000, Args: []ProbeArg{{Value: rw + 8, Share: 1}}},
		}}
	})
	m, ok := lockParks(w)
	if !ok || m.PerSec != 3000 || m.Readers != 500 || m.Writers != 500 || m.Estimated {
		t.Fatalf("parks %+v, want 3,000/s (500 readers, 500 writers) counted in the window", m)
	}
	if m.Mutex != rw || math.Abs(m.MutexShare-2750.0/3000) > 1e-9 {
		t.Errorf("mutex %#x with %.3f of parks, want %#x with %.3f", m.Mutex, m.MutexShare, uint64(rw), 2750.0/3000)
	}
	if _, ok := lockParks(win(10, func(w *Window) {})); ok {
		t.Error("a window without probes has parks")
	}
}
