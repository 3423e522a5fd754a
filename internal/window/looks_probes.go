package window

import (
	"context"
	"errors"
	"math"
	"os"
	"time"

	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// ProbesLook counts the calls the doctor's rules ask about (timers and
// sleeps, channel waits, mutex slow paths, goroutine starts and exits, mark
// assists, process starts, file opens) with entry uprobes on Go processes,
// under the probe engine's default budget, and names their callers; a
// function too hot to probe through the window (mutex parks under heavy
// contention, a busy select) is probed in bursts by the engine. It
// needs root and BPF uprobe_multi; without them it says so and the rules
// fall back to stack samples.
type ProbesLook struct {
	// ProcRoot is the procfs mount the target is read through ("" is /proc).
	ProcRoot string
	// Window caps the probes' window (default 2 s; the look's own length
	// when shorter).
	Window time.Duration
}

// Source implements Look.
func (ProbesLook) Source() Source { return SourceProbes }

// probeRecipes are the recipes whose functions the rules read.
var probeRecipes = []string{"timers", "locks", "goroutines", "gcassist", "exec", "files"}

// lookSkips are recipe functions the look leaves out. Mutex.lockSlow runs
// at every failed fast path of Lock, spinning included: 300,000-750,000
// calls a second in a program contending on one RWMutex, far too hot to
// probe through the window (bursts would sample it at a duty of a few
// percent), and counting it in the pre-flight slows the target enough to
// change what the other functions show. The rules read the mutex parks
// instead (the Semacquire functions), which are what contention costs,
// sampled in bursts where they are too hot themselves.
var lookSkips = map[string]bool{"sync.(*Mutex).lockSlow": true}

// Look implements Look.
func (l ProbesLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	if !w.IsGo() {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("probes need root")
	}
	win := l.Window
	if win <= 0 {
		win = 2 * time.Second
	}
	// Leave the end of the look for the other sources' last reads.
	win = min(win, d-500*time.Millisecond)
	if win < 200*time.Millisecond {
		return nil
	}
	var ps []probe.Probe
	seen := map[string]bool{}
	for _, name := range probeRecipes {
		for _, p := range probe.Recipes[name].Probes {
			if !seen[p.Func] && !lookSkips[p.Func] {
				seen[p.Func] = true
				ps = append(ps, p)
			}
		}
	}
	start := time.Now()
	fs := proc.NewFS(l.ProcRoot)
	r, err := probe.Run(ctx, fs, pid, ps, probe.Options{Duration: win})
	if err != nil {
		return err
	}
	w.Probes = ProbesOf(r)
	// Where a leak is suspected, a second look at where goroutines park,
	// to name where the leaking ones block: runtime.gopark is too hot in
	// a busy server to probe in every process, and the window's probes
	// would share their budget with it. It stays within the look.
	if !LeakSuspected(w.Probes) {
		return nil
	}
	park := min(win, d-time.Since(start)-500*time.Millisecond)
	if park < 500*time.Millisecond {
		return nil
	}
	pr, err := probe.Run(ctx, fs, pid, probe.Recipes["parks"].Probes, probe.Options{Duration: park})
	if err != nil {
		return nil // the leak is still decided; only its block site is missing
	}
	addParks(w.Probes, pr)
	return nil
}

// LeakParksKey is where Probes.Calls keeps runtime.gopark's calls from
// the look taken after the window's when a leak was suspected: its Count
// is over its own Seconds, so rules that read rates by name never see it.
const LeakParksKey = "leak:" + probe.Gopark

// LeakRise and LeakStayShare decide a suspected goroutine leak from the
// probes: goroutines rising by at least LeakRise over the window, with at
// least LeakStayShare of those started staying (a pool growing with load
// keeps fewer).
const (
	LeakRise      = DumpGoroutineRise
	LeakStayShare = 0.5
)

// LeakSuspected says the probes saw goroutines started and not ended at a
// leak's pace (runtime.newproc against runtime.goexit1).
func LeakSuspected(p *Probes) bool {
	starts, ok1 := p.Rate(probe.NewprocFunc)
	exits, ok2 := p.Rate(probe.GoexitFunc)
	if !ok1 || !ok2 {
		return false
	}
	net := starts - exits
	return net*p.Seconds >= LeakRise && net >= LeakStayShare*starts
}

// addParks adds the parks look's runtime.gopark to p under LeakParksKey,
// each calling site with the function its goroutine started in.
func addParks(p *Probes, r *probe.Result) {
	for _, f := range r.Funcs {
		if f.Func != probe.Gopark || f.Skipped != "" || r.Seconds <= 0 {
			continue
		}
		c := ProbeCalls{Count: f.Count, Seconds: r.Seconds}
		for _, cl := range f.Callers {
			c.Callers = append(c.Callers, Site{Func: cl.Func, File: cl.File, Line: cl.Line, Share: cl.Share})
			c.Entries = append(c.Entries, probe.EntryOf(cl.Stack))
		}
		p.Calls[LeakParksKey] = c
	}
}

// ProbesOf turns a probe result into the window's Probes: each function
// under the name asked for and, when the binary names it otherwise (Go
// 1.24 moved sync's lockSlow), under that name too. A function too hot to
// probe through the window within the budget was probed in bursts: its
// count is the engine's estimate and its Duty the share of the window it
// was attached. One too hot even for bursts keeps the rate its pre-flight
// counted, apart (PreflightRate), since it is an estimate from a fraction
// of a second and has no callers.
func ProbesOf(r *probe.Result) *Probes {
	p := &Probes{Seconds: r.Seconds, Mechanism: r.Mechanism, Calls: map[string]ProbeCalls{}}
	for _, f := range r.Funcs {
		if f.Skipped != "" && f.Kind != "" && f.PreflightPerSec > 0 {
			// Found in the binary (Kind set) and counted in the
			// pre-flight, then left out: too hot.
			c := ProbeCalls{Count: uint64(math.Round(f.PreflightPerSec))}
			p.Calls[preflightKey+f.Func] = c
			if f.Symbol != "" && f.Symbol != f.Func {
				p.Calls[preflightKey+f.Symbol] = c
			}
		}
		if f.Skipped != "" {
			continue
		}
		c := ProbeCalls{Count: f.Count}
		if f.Sampled != nil {
			c.Duty = f.Sampled.Duty
		}
		for _, cl := range f.Callers {
			c.Callers = append(c.Callers, Site{Func: cl.Func, File: cl.File, Line: cl.Line, Share: cl.Share})
		}
		for _, a := range f.Args {
			c.Args = append(c.Args, ProbeArg{Value: a.Value, Share: a.Share})
		}
		p.Calls[f.Func] = c
		if f.Symbol != "" && f.Symbol != f.Func {
			p.Calls[f.Symbol] = c
		}
	}
	return p
}

// preflightKey prefixes, in Probes.Calls, the functions carried at their
// pre-flight rate, whose Count is then calls per second: rules that read
// exact counts by name never see them.
const preflightKey = "preflight:"

// PreflightRate returns the calls per second the pre-flight counted for a
// function the governor then found too hot to probe, even in bursts,
// false when fn was probed in the window or not at all. The pre-flight
// counts for at most 100 ms, and less when it is costly, so the rate is
// an estimate (seen at a third to a tenth of the window's rate on
// contended mutexes, whose park rate swings with the Go mutex's
// starvation mode).
func (p *Probes) PreflightRate(fn string) (float64, bool) {
	if p == nil {
		return 0, false
	}
	c, ok := p.Calls[preflightKey+fn]
	return float64(c.Count), ok
}
