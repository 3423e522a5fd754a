package doctor

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestProbedRules checks the rules that read probe counts, on windows
// built in the test: the leak decided from outside, and the code named
// from probed callers in preference to stack samples.
func TestProbedRules(t *testing.T) {
	host := &Host{CPUs: 2}
	probes := func(sec float64, calls map[string]ProbeCalls) *Probes {
		return &Probes{Seconds: sec, Calls: calls, Mechanism: "test"}
	}
	goSite := Site{Func: "main.serveClient", File: "/src/main.go", Line: 88, Share: 1}
	tests := []struct {
		name     string
		w        *Window
		warn     []string
		code     string
		codeFrom string
		// evidence is a piece of the evidence text the finding must hold;
		// role a piece of the first code's role.
		evidence, role string
	}{
		{name: "leak: 200 started a second, none end", w: win(10, func(w *Window) {
			w.Probes = probes(4, map[string]ProbeCalls{probeNewproc: {Count: 800, Callers: []Site{goSite}}, probeGoexit: {Count: 0}})
		}), warn: []string{"goroutine-leak"}, code: "main.serveClient", codeFrom: "probes"},
		{name: "a server's goroutine per request ends", w: win(10, func(w *Window) {
			w.Probes = probes(4, map[string]ProbeCalls{probeNewproc: {Count: 4000, Callers: []Site{goSite}}, probeGoexit: {Count: 3990}})
		})},
		{name: "a pool growing with load is not a leak", w: win(10, func(w *Window) {
			w.Probes = probes(4, map[string]ProbeCalls{probeNewproc: {Count: 4000}, probeGoexit: {Count: 3500}})
		})},
		{name: "newproc without goexit cannot decide", w: win(10, func(w *Window) {
			w.Probes = probes(4, map[string]ProbeCalls{probeNewproc: {Count: 800}})
		})},
		{name: "the ticker named from probed chanrecv callers", w: win(10, func(w *Window) {
			w.VolCtxsw = 20000
			w.UserSec, w.SysSec = 0.06, 0.14
			w.IOCalls = 5
			w.Probes = probes(4, map[string]ProbeCalls{
				"runtime.chanrecv2": {Count: 4000, Callers: []Site{{Func: "example.com/fastclock.refresh", File: "/src/fastclock.go", Line: 30, Share: 1}}},
				"time.Sleep":        {Count: 4},
			})
		}), warn: []string{"idle-wakeups"}, code: "example.com/fastclock.refresh", codeFrom: "probes"},
		{name: "the sleep loop named from probed time.Sleep callers over stack samples", w: win(10, func(w *Window) {
			w.VolCtxsw = 20000
			w.UserSec, w.SysSec = 0.06, 0.14
			w.IOCalls = 5
			w.Stacks = &Stacks{Samples: 10, Sites: map[string][]Site{"timer": {{Func: "main.other", Share: 0.5}}}}
			w.Probes = probes(4, map[string]ProbeCalls{"time.Sleep": {Count: 3900, Callers: []Site{{Func: "main.(*clock).run", File: "/src/clock.go", Line: 12, Share: 1}},
				Args: []ProbeArg{{Value: 1e6, Share: 1}}}})
		}), warn: []string{"idle-wakeups"}, code: "main.(*clock).run", codeFrom: "probes", evidence: "sleep_ms 1 ms"},
		{name: "a select loop on a ticker too hot to probe throughout: named from the bursts, said sampled", w: win(10, func(w *Window) {
			w.VolCtxsw = 20000
			w.UserSec, w.SysSec = 0.06, 0.14
			w.IOCalls = 5
			w.Probes = probes(4, map[string]ProbeCalls{"runtime.selectgo": {Count: 4000, Duty: 0.25, Callers: []Site{{Func: "main.(*pump).loop", File: "/src/pump.go", Line: 51, Share: 1}}}})
		}), warn: []string{"idle-wakeups"}, code: "main.(*pump).loop", codeFrom: "probes", role: "sampled in bursts over 25% of the window"},
		{name: "a Timer loop named from probed Reset callers, its period from Reset's duration", w: win(10, func(w *Window) {
			w.VolCtxsw = 16000
			w.UserSec, w.SysSec = 0.06, 0.14
			w.IOCalls = 5
			w.Probes = probes(4, map[string]ProbeCalls{"time.(*Timer).Reset": {Count: 2000, Callers: []Site{{Func: "metrics.(*Flusher).Run", File: "/src/flusher.go", Line: 35, Share: 1}},
				Args: []ProbeArg{{Value: 2e6, Share: 1}}}})
		}), warn: []string{"idle-wakeups"}, code: "metrics.(*Flusher).Run", codeFrom: "probes", evidence: "timer_reset_ms 2 ms"},
		{name: "the mutex's callers from probes", w: win(10, func(w *Window) {
			w.UserSec = 4
			w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassLock: 0.06, ClassUserCode: 0.8}}
			w.Probes = probes(4, map[string]ProbeCalls{"internal/sync.(*Mutex).lockSlow": {Count: 40000, Callers: []Site{{Func: "main.(*table).add", File: "/src/t.go", Line: 7, Share: 0.9}},
				Args: []ProbeArg{{Value: 0x5f8ed8, Name: "main.tableMu", Share: 0.95}}}})
		}), warn: []string{"lock-contention"}, code: "main.(*table).add", codeFrom: "probes", evidence: "mutex main.tableMu"},
		{name: "the re-opened path from probes", w: win(10, func(w *Window) {
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 50000, "close": 50000}}
			w.Probes = probes(4, map[string]ProbeCalls{"os.OpenFile": {Count: 40000, Callers: []Site{{Func: "main.readStat", File: "/src/r.go", Line: 3, Share: 1}},
				Args: []ProbeArg{{Name: "/proc/self/stat", Share: 1}}}})
		}), warn: []string{"file-reopen-churn"}, code: "main.readStat", codeFrom: "probes", evidence: "path /proc/self/stat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, un := Evaluate(tt.w, host)
			if got := warnIDs(found); !slices.Equal(got, tt.warn) {
				t.Fatalf("warn-level findings %v, want %v:%s", got, tt.warn, describe(found))
			}
			if tt.code != "" {
				f := found[0]
				if len(f.Code) == 0 || f.Code[0].Func != tt.code || f.Code[0].From != tt.codeFrom {
					t.Errorf("%s names %v, want %s from %s", f.ID, f.Code, tt.code, tt.codeFrom)
				}
				if !strings.Contains(evidenceText(f.Evidence), tt.evidence) {
					t.Errorf("evidence %q lacks %q", evidenceText(f.Evidence), tt.evidence)
				}
				if len(f.Code) > 0 && !strings.Contains(f.Code[0].Role, tt.role) {
					t.Errorf("role %q lacks %q", f.Code[0].Role, tt.role)
				}
				if !slices.Contains(f.Sources, SourceProbes) {
					t.Errorf("%s sources %v lack probes", f.ID, f.Sources)
				}
			}
			leakUndecided := slices.ContainsFunc(un, func(u Unchecked) bool { return u.Rule == "goroutine-leak" })
			if _, ok := tt.w.Probes.Rate(probeGoexit); ok == leakUndecided {
				t.Errorf("goroutine-leak undecided = %v with goexit probed = %v", leakUndecided, ok)
			}
		})
	}
}

// TestReopenFromProbes: without syscall counts, exact os.OpenFile counts
// decide reopen churn when the descriptors stay flat, and nothing when
// they pile up (a leak is another rule's).
func TestReopenFromProbes(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	win := func(fds1 int32) *Window {
		return &Window{PID: 7, Comm: "svc", GoVersion: "go1.26.8", Start: t0, End: t0.Add(10 * time.Second),
			UserSec: 0.5, SysSec: 0.5, IOCalls: -1, FDsKnown: true,
			Series: []Point{{T: 0, FDs: 20, Threads: 6}, {T: 10, FDs: fds1, Threads: 6}},
			Probes: &Probes{Seconds: 2, Calls: map[string]ProbeCalls{
				"os.OpenFile": {Count: 4000, Callers: []Site{{Func: "main.(*config).load", File: "main.go", Line: 12, Share: 1}}},
			}}}
	}
	h := &Host{CPUs: 2}
	f := checkReopen(win(21), h)
	if f == nil || f.Severity < Warn || !slices.Contains(f.Sources, SourceProbes) || f.Confidence != "high" {
		t.Fatalf("2,000 opens/s with flat descriptors: %+v", f)
	}
	if len(f.Code) == 0 || f.Code[0].Func != "main.(*config).load" {
		t.Errorf("code %+v: want main.(*config).load", f.Code)
	}
	if f := checkReopen(win(20000), h); f != nil {
		t.Errorf("descriptors piling up is not reopen churn: %+v", f)
	}
}
