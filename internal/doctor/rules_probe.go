package doctor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Probed functions the rules read (from the probe engine's recipes, when
// it ran). Each list is in order of preference.
var (
	// probeTimers are the calls a timer or sleep loop makes at each tick:
	// sleeping, re-arming, or receiving from a ticker's channel.
	probeTimers = []string{"time.Sleep", "time.AfterFunc", "time.(*Timer).Reset", "time.(*Ticker).Reset", "time.NewTimer", "time.NewTicker"}
	// probeWaits are where an idle goroutine waits for its tick when no
	// timer call is made per tick (a ticker's channel).
	probeWaits = []string{"runtime.chanrecv1", "runtime.chanrecv2", "runtime.selectgo"}
	// probeLocks are the slow paths of a contended mutex.
	probeLocks = []string{"internal/sync.(*Mutex).lockSlow", "sync.(*Mutex).lockSlow", "sync.(*RWMutex).Lock", "sync.(*RWMutex).RLock"}
	// probeNewproc starts a goroutine (a go statement); probeGoexit ends one.
	probeNewproc = "runtime.newproc"
	probeGoexit  = "runtime.goexit1"
	// probeAssist pays mark assist; its callers allocate.
	probeAssist = []string{"runtime.gcAssistAlloc"}
	// probeExec and probeOpen start processes and open files.
	probeExec = []string{"os.StartProcess", "syscall.forkExec"}
	probeOpen = []string{"os.OpenFile", "syscall.Open"}
)

// probeCode names the callers of the first of fns that was probed and
// called at least minRate times a second, with that rate.
func probeCode(w *Window, fns []string, minRate float64, role string) (code []CodeRef, fn string, rate float64) {
	for _, f := range fns {
		r, ok := w.Probes.Rate(f)
		if !ok || r < minRate || r == 0 {
			continue
		}
		callers := slices.Clone(w.Probes.Calls[f].Callers)
		slices.SortStableFunc(callers, func(a, b Site) int { return cmp.Compare(b.Share, a.Share) })
		for _, c := range callers {
			code = append(code, CodeRef{Func: c.Func, File: c.File, Line: c.Line, Role: role + " (" + f + ")", Share: round(c.Share, 3), From: "probes"})
			if len(code) == 3 {
				break
			}
		}
		if len(code) > 0 {
			return code, f, r
		}
	}
	return nil, "", 0
}

// codeFrom names the code responsible: from probes when they caught it
// (exact calls), else from the stack samples' sites under stackKey.
func codeFrom(w *Window, stackKey string, fns []string, role string) []CodeRef {
	if code, _, _ := probeCode(w, fns, 0, role); len(code) > 0 {
		return code
	}
	return codeAt(w, stackKey, role)
}

// codeSources returns sources with what the code came from added.
func codeSources(sources []Source, code []CodeRef) []Source {
	for _, c := range code {
		s := SourceStacks
		switch c.From {
		case "probes":
			s = SourceProbes
		case "goroutine dump":
			s = SourceRuntime
		}
		if !slices.Contains(sources, s) {
			sources = append(sources, s)
		}
	}
	return sources
}

// probeArg returns the most common argument of a probed function, false
// when none was read.
func probeArg(w *Window, fn string) (ProbeArg, bool) {
	if w.Probes == nil {
		return ProbeArg{}, false
	}
	args := w.Probes.Calls[fn].Args
	if len(args) == 0 {
		return ProbeArg{}, false
	}
	return slices.MaxFunc(args, func(a, b ProbeArg) int { return cmp.Compare(a.Share, b.Share) }), true
}

// goroutineLeakProbed decides a goroutine leak from outside: goroutines
// started (runtime.newproc) and not ended (runtime.goexit1) over the
// probes' window. Most of those started must stay, and enough of them to
// matter, as from the runtime's counts.
func goroutineLeakProbed(w *Window) *Finding {
	starts, ok1 := w.Probes.Rate(probeNewproc)
	exits, ok2 := w.Probes.Rate(probeGoexit)
	if !ok1 || !ok2 {
		return nil
	}
	sec := w.Probes.Seconds
	rise := (starts - exits) * sec
	if rise < goroutineLeakRise || starts-exits < leakStayShare*starts {
		return nil
	}
	code, _, _ := probeCode(w, []string{probeNewproc}, 0, "starts the goroutines that stay")
	return &Finding{
		Severity: Warn,
		Title:    fmt.Sprintf("%.0f goroutines started a second, %.0f end", starts, exits),
		Observed: fmt.Sprintf("goroutines grow by %.0f a second", starts-exits),
		Evidence: EvidenceList{
			{"started_per_s", round(starts, 1), "/s"}, {"ended_per_s", round(exits, 1), "/s"},
			{"net_rise", math.Round(rise), ""}, {"probed_s", round(sec, 2), "s"},
		},
		Cause:      "Goroutines are started and never finish: blocked on a channel nobody sends to, a request without a timeout, a ticker loop without a stop. Counted from outside with probes on runtime.newproc (go statements) and runtime.goexit1 (goroutine exits).",
		Fix:        "Give the goroutines started at the code named a way out (context cancellation, timeouts, closing channels); group a goroutine dump by stack (gosleuth inspect --pid PID, with the agent) to see where they wait.",
		Sources:    []Source{SourceProbes},
		Confidence: "high",
		Code:       code,
	}
}

// leakStayShare is the share of started goroutines that must stay for a
// rise to be a leak rather than a pool growing with load.
const leakStayShare = 0.5
