package doctor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/window"
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
	// probeParks are where a goroutine parks on a sync mutex, each with
	// the names it has had: a Mutex's Lock (an RWMutex writer queues on
	// its inner Mutex first), an RWMutex reader waiting for a writer, a
	// writer waiting for the readers. WaitGroup.Wait and Cond park
	// elsewhere (runtime_SemacquireWaitGroup, runtime_Semacquire,
	// notifyListWait): they are not contention.
	probeParks = [][]string{
		{probe.SemacquireMutex, "internal/sync.runtime_SemacquireMutex"},
		{probe.SemacquireRWMutexR},
		{probe.SemacquireRWMutex},
	}
	// probeNewproc starts a goroutine (a go statement); probeGoexit ends one.
	probeNewproc = probe.NewprocFunc
	probeGoexit  = probe.GoexitFunc
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
		how := f
		if d := w.Probes.Calls[f].Duty; d > 0 {
			how += fmt.Sprintf(", sampled in bursts over %.0f%% of the window", 100*d)
		}
		for _, c := range callers {
			code = append(code, CodeRef{Func: c.Func, File: c.File, Line: c.Line, Role: role + " (" + how + ")", Share: round(c.Share, 3), From: "probes"})
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

// ownCodeFirst keeps only the program's own sites when there are any: the
// standard library starts goroutines of its own that end (net/http's
// background read of each request, half of an unseen leaking server's
// goroutine starts), and a leak is fixed in the program's code.
func ownCodeFirst(code []CodeRef) []CodeRef {
	own := slices.DeleteFunc(slices.Clone(code), func(c CodeRef) bool { return window.StdlibFunc(c.Func) })
	if len(own) == 0 {
		return code
	}
	return own
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
		case "goroutine dump", "heap profile", "runtime books":
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
	code = ownCodeFirst(code)
	ev := EvidenceList{
		{"started_per_s", round(starts, 1), "/s"}, {"ended_per_s", round(exits, 1), "/s"},
		{"net_rise", math.Round(rise), ""}, {"probed_s", round(sec, 2), "s"},
	}
	fix := "Give the goroutines started at the code named a way out (context cancellation, timeouts, closing channels); group a goroutine dump by stack (gosleuth inspect --pid PID, with the agent) to see where they wait."
	if b, ok := leakBlock(w, starts, exits); ok {
		code = append(code, b.code)
		ev = append(ev, Evidence{"block_parks_per_s", round(b.perSec, 1), "/s"}, Evidence{"parks_probed_s", round(b.seconds, 2), "s"})
		fix = "Give the goroutines started at the code named a way out where they block (context cancellation, timeouts, a receiver or a buffer for the channel, closing it)."
	}
	return &Finding{
		Severity:   Warn,
		Title:      fmt.Sprintf("%.0f goroutines started a second, %.0f end", starts, exits),
		Observed:   fmt.Sprintf("goroutines grow by %.0f a second", starts-exits),
		Evidence:   ev,
		Cause:      "Goroutines are started and never finish: blocked on a channel nobody sends to, a request without a timeout, a ticker loop without a stop. Counted from outside with probes on runtime.newproc (go statements) and runtime.goexit1 (goroutine exits).",
		Fix:        fix,
		Sources:    []Source{SourceProbes},
		Confidence: "high",
		Code:       code,
	}
}

// leakStayShare is the share of started goroutines that must stay for a
// rise to be a leak rather than a pool growing with load.
const leakStayShare = window.LeakStayShare

// leakPark is where the leaking goroutines block, from the parks look.
type leakPark struct {
	code    CodeRef
	perSec  float64 // parks a second at the site
	seconds float64 // how long the parks were probed
}

// leakBlock finds where the leaking goroutines block among the parks
// probed after the window (runtime.gopark, window.LeakParksKey). A
// goroutine started at a creation site runs a function named after the
// function holding the go statement (its gowrapN or funcN, as Go names
// them), so the parks whose goroutine started there are the candidates.
// A leaked goroutine parks once and never again, so its site parks at
// about the pace the site leaks goroutines (net of those that end),
// while live goroutines of the same function park again and again:
// the candidate nearest that pace, from half of it to twice the pace
// goroutines are started there (the leak's own parks, plus one park of
// each goroutine that ends), is where they block. None when the parks
// were not probed or none fits (a goroutine started by a named function,
// `go f()`, carries no name of its creator; a leaked loop parks often).
func leakBlock(w *Window, starts, exits float64) (leakPark, bool) {
	parks, ok := w.Probes.Calls[window.LeakParksKey]
	if !ok || parks.Seconds <= 0 || starts <= 0 || len(parks.Entries) != len(parks.Callers) {
		return leakPark{}, false
	}
	total := float64(parks.Count) / parks.Seconds
	creators := w.Probes.Calls[probeNewproc].Callers
	var best leakPark
	bestDist := math.Inf(1)
	for i, c := range parks.Callers {
		entry := parks.Entries[i]
		if entry == "" {
			continue
		}
		p := total * c.Share
		for _, cr := range creators {
			if cr.Func == "" || !strings.HasPrefix(entry, cr.Func+".") {
				continue
			}
			created := starts * cr.Share
			leaked := (starts - exits) * cr.Share
			if p < leaked/2 || p > 2*created {
				continue
			}
			// Distance on a log scale: a half and a double are as far.
			if d := math.Abs(math.Log(p / leaked)); d < bestDist {
				bestDist = d
				best = leakPark{
					code: CodeRef{
						Func: c.Func, File: c.File, Line: c.Line,
						Role:  fmt.Sprintf("where they block (%.0f parks/s, once per goroutine started at %s)", p, cr.Func),
						Share: round(c.Share, 3), From: "probes",
					},
					perSec: p, seconds: parks.Seconds,
				}
			}
		}
	}
	return best, bestDist < math.Inf(1)
}

// mutexParks is what the probes saw of goroutines parking on sync
// mutexes.
type mutexParks struct {
	// PerSec is the parks a second over all the mutex park functions
	// probed; Estimated says part of it is a pre-flight's estimate (a
	// function too hot to probe, even in bursts), Duty, when set, that
	// part of it was sampled in bursts attached that share of the window
	// (the lowest of the functions sampled).
	PerSec    float64
	Estimated bool
	Duty      float64
	// Readers and Writers are the RWMutex parks among them: readers
	// waiting for a writer, writers waiting for readers.
	Readers, Writers float64
	// Code are the parking callers, by share of all the parks, and
	// Sampled the share of the parks whose callers were sampled.
	Code    []CodeRef
	Sampled float64
	// Mutex is the address of the mutex most parks were on, MutexShare
	// their share of the parks whose argument was read.
	Mutex      uint64
	MutexShare float64
}

// lockParks returns the parks on sync mutexes the probes counted, false
// when none of the park functions was probed (no probes, or a Go whose
// names differ).
func lockParks(w *Window) (mutexParks, bool) {
	var m mutexParks
	if w.Probes == nil {
		return m, false
	}
	probed := false
	callers := map[Site]float64{}
	mutexes := map[uint64]float64{}
	sampled, argued := 0.0, 0.0
	for i, names := range probeParks {
		for _, fn := range names {
			r, ok := w.Probes.Rate(fn)
			if !ok {
				if r, ok = w.Probes.PreflightRate(fn); ok {
					m.Estimated = true
				}
			}
			if !ok {
				continue
			}
			probed = true
			m.PerSec += r
			switch i {
			case 1:
				m.Readers += r
			case 2:
				m.Writers += r
			}
			c := w.Probes.Calls[fn]
			if c.Duty > 0 && (m.Duty == 0 || c.Duty < m.Duty) {
				m.Duty = c.Duty
			}
			if len(c.Callers) > 0 {
				sampled += r
			}
			for _, s := range c.Callers {
				callers[Site{Func: s.Func, File: s.File, Line: s.Line}] += r * s.Share
			}
			if len(c.Args) > 0 {
				argued += r
			}
			for _, a := range c.Args {
				if mu, ok := probe.MutexOf(fn, a.Value); ok {
					mutexes[mu] += r * a.Share
				}
			}
			break // one name per kind: the binary's own name is a second key
		}
	}
	if !probed {
		return m, false
	}
	if m.PerSec == 0 {
		return m, true
	}
	// Shares are of all the parks: those of a function too hot to sample
	// are nobody's here (the rule names them from stack samples).
	m.Sampled = sampled / m.PerSec
	for s, n := range callers {
		s.Share = n / m.PerSec
		m.Code = append(m.Code, CodeRef{Func: s.Func, File: s.File, Line: s.Line, Role: "parks on the mutex", Share: round(s.Share, 3), From: "probes"})
	}
	slices.SortFunc(m.Code, func(a, b CodeRef) int {
		return cmp.Or(cmp.Compare(b.Share, a.Share), cmp.Compare(a.Func, b.Func), cmp.Compare(a.Line, b.Line))
	})
	m.Code = m.Code[:min(len(m.Code), 3)]
	best := 0.0
	for mu, n := range mutexes {
		if n > best || n == best && mu < m.Mutex {
			m.Mutex, best = mu, n
		}
	}
	if best > 0 {
		m.MutexShare = best / argued
	}
	return m, true
}
