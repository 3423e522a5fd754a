package window

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// ProbesLook counts the calls the doctor's rules ask about (timers and
// sleeps, channel waits, mutex slow paths, goroutine starts and exits, mark
// assists, process starts, file opens) with entry uprobes on Go processes,
// under the probe engine's default budget, and names their callers. It
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
			if !seen[p.Func] {
				seen[p.Func] = true
				ps = append(ps, p)
			}
		}
	}
	r, err := probe.Run(ctx, proc.NewFS(l.ProcRoot), pid, ps, probe.Options{Duration: win})
	if err != nil {
		return err
	}
	w.Probes = ProbesOf(r)
	return nil
}

// ProbesOf turns a probe result into the window's Probes: each function
// under the name asked for and, when the binary names it otherwise (Go
// 1.24 moved sync's lockSlow), under that name too.
func ProbesOf(r *probe.Result) *Probes {
	p := &Probes{Seconds: r.Seconds, Mechanism: r.Mechanism, Calls: map[string]ProbeCalls{}}
	for _, f := range r.Funcs {
		if f.Skipped != "" {
			continue
		}
		c := ProbeCalls{Count: f.Count}
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
