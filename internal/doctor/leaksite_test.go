package doctor

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/window"
)

// TestLeakBlockSite checks, on windows built in the test, that a leak
// decided from outside names where its goroutines block from the parks
// looked at after the window: the parks whose goroutine started in a
// function named after the creation site (gowrapN, funcN), at about the
// pace goroutines leak there (a leaked goroutine parks once), and no
// other.
func TestLeakBlockSite(t *testing.T) {
	host := &Host{CPUs: 2}
	publish := Site{Func: "main.(*Notifier).Publish", File: "/src/main.go", Line: 24, Share: 1}
	deliver := Site{Func: "main.(*Notifier).deliver", File: "/src/main.go", Line: 20}
	produce := Site{Func: "main.produce", File: "/src/main.go", Line: 32}
	worker := Site{Func: "main.(*Notifier).loop", File: "/src/main.go", Line: 41}
	at := func(s Site, share float64) Site { s.Share = share; return s }
	// probes: started and ended goroutines over a 2 s window, and the
	// parks over a 2 s look of their own (nil: not looked at).
	probes := func(started, ended uint64, parks *ProbeCalls) func(w *Window) {
		return func(w *Window) {
			w.Probes = &Probes{Seconds: 2, Mechanism: "test", Calls: map[string]ProbeCalls{
				probeNewproc: {Count: started, Callers: []Site{publish}},
				probeGoexit:  {Count: ended},
			}}
			if parks != nil {
				w.Probes.Calls[window.LeakParksKey] = *parks
			}
		}
	}
	parks := func(perSec float64, sites []Site, entries ...string) *ProbeCalls {
		return &ProbeCalls{Count: uint64(2 * perSec), Seconds: 2, Callers: sites, Entries: entries}
	}
	tests := []struct {
		name string
		w    *Window
		// block is the block site named ("" none); leak says a leak is
		// found at all.
		block string
		leak  bool
	}{
		{"p3: blocked sends at the leak's pace beside the producer's sleeps",
			win(10, probes(380, 0, parks(380, []Site{at(deliver, 0.5), at(produce, 0.5)}, "main.(*Notifier).Publish.gowrap1", "main.main.gowrap1"))),
			"main.(*Notifier).deliver:20", true},
		{"a live worker of the same creator parks again and again: the leak's site is the one at its pace",
			win(10, probes(380, 0, parks(5190, []Site{at(worker, 5000.0/5190), at(deliver, 190.0/5190)}, "main.(*Notifier).Publish.func1", "main.(*Notifier).Publish.gowrap1"))),
			"main.(*Notifier).deliver:20", true},
		{"two of the creator's kinds of goroutine fit: the one nearest the leak's pace",
			win(10, probes(380, 0, parks(540, []Site{at(worker, 350.0/540), at(deliver, 190.0/540)}, "main.(*Notifier).Publish.func1", "main.(*Notifier).Publish.gowrap1"))),
			"main.(*Notifier).deliver:20", true},
		{"half end after parking once where the other half stay",
			win(10, probes(400, 200, parks(200, []Site{at(deliver, 1)}, "main.(*Notifier).Publish.gowrap1"))),
			"main.(*Notifier).deliver:20", true},
		{"only goroutines parking far more often than they are started: none named",
			win(10, probes(380, 0, parks(5000, []Site{at(worker, 1)}, "main.(*Notifier).Publish.func1"))),
			"", true},
		{"the creator's goroutines park far below the leak's pace: they block elsewhere",
			win(10, probes(380, 0, parks(40, []Site{at(deliver, 1)}, "main.(*Notifier).Publish.gowrap1"))),
			"", true},
		{"stacks cut short of runtime.goexit: no entry, none named",
			win(10, probes(380, 0, parks(190, []Site{at(deliver, 1)}, ""))),
			"", true},
		{"a named function started without arguments carries no creator's name",
			win(10, probes(380, 0, parks(190, []Site{at(deliver, 1)}, "main.stuck"))),
			"", true},
		{"entries that do not line up with the callers are not read",
			win(10, probes(380, 0, parks(190, []Site{at(deliver, 1)}))),
			"", true},
		{"parks not looked at: the leak without its block site",
			win(10, probes(380, 0, nil)),
			"", true},
		{"no leak: every goroutine started ends, whatever parks",
			win(10, probes(2000, 2000, parks(2000, []Site{at(deliver, 1)}, "main.(*Notifier).Publish.gowrap1"))),
			"", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := checkGoroutineLeak(tt.w, host)
			if (f != nil) != tt.leak {
				t.Fatalf("leak found %v, want %v", f != nil, tt.leak)
			}
			if f == nil {
				return
			}
			if f.Severity != Warn || f.Code[0].Func != publish.Func {
				t.Errorf("finding %s, first code %+v", f.Severity, f.Code[0])
			}
			var block string
			for _, c := range f.Code[1:] {
				if strings.HasPrefix(c.Role, "where they block") {
					block = fmt.Sprintf("%s:%d", c.Func, c.Line)
				}
			}
			if block != tt.block {
				t.Errorf("block site %q, want %q (code %+v)", block, tt.block, f.Code)
			}
			hasEv := false
			for _, e := range f.Evidence {
				hasEv = hasEv || e.Name == "block_parks_per_s"
			}
			if hasEv != (tt.block != "") {
				t.Errorf("evidence %+v", f.Evidence)
			}
		})
	}
}

// TestLeakSuspected: the parks are looked at only where the window's
// probes saw goroutines rise at a leak's pace, as the rule decides one.
func TestLeakSuspected(t *testing.T) {
	tests := []struct {
		name           string
		started, ended uint64
		seconds        float64
		want           bool
		withoutGoexit  bool
	}{
		{"p3: 190/s, none end", 380, 0, 2, true, false},
		{"a server's connections: all end", 2000, 2000, 2, false, false},
		{"a pool growing with load: most end", 2000, 1800, 2, false, false},
		{"too few to matter", 40, 0, 2, false, false},
		{"goroutine exits not probed", 380, 0, 2, false, true},
	}
	for _, tt := range tests {
		p := &Probes{Seconds: tt.seconds, Calls: map[string]ProbeCalls{probeNewproc: {Count: tt.started}}}
		if !tt.withoutGoexit {
			p.Calls[probeGoexit] = ProbeCalls{Count: tt.ended}
		}
		if got := window.LeakSuspected(p); got != tt.want {
			t.Errorf("%s: LeakSuspected = %v, want %v", tt.name, got, tt.want)
		}
		// The rule and the look agree.
		f := goroutineLeakProbed(&Window{Probes: p})
		if (f != nil) != tt.want {
			t.Errorf("%s: rule found a leak %v, look suspects %v", tt.name, f != nil, tt.want)
		}
	}
}

// TestLeakNamesOwnCreationSites: the standard library's own goroutine
// starts (net/http's background read per request, which end) are not
// named as a leak's creation site when the program's own site is known.
func TestLeakNamesOwnCreationSites(t *testing.T) {
	w := win(10, func(w *Window) {
		w.Probes = &Probes{Seconds: 2, Calls: map[string]ProbeCalls{
			probeNewproc: {Count: 600, Callers: []Site{
				{Func: "main.handleSubmit", File: "/src/main.go", Line: 24, Share: 0.5},
				{Func: "net/http.(*connReader).startBackgroundRead", File: "/go/src/net/http/server.go", Line: 698, Share: 0.5}}},
			probeGoexit: {Count: 300},
		}}
	})
	f := ruleSeverity(t, w, &Host{CPUs: 2}, "goroutine-leak", Warn)
	for _, c := range f.Code {
		if window.StdlibFunc(c.Func) {
			t.Errorf("names %s as a creation site beside the program's own main.handleSubmit", c.Func)
		}
	}
	if len(f.Code) == 0 || f.Code[0].Func != "main.handleSubmit" {
		t.Errorf("code %v, want main.handleSubmit first", f.Code)
	}
}
