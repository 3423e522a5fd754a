package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/profileview"
	"github.com/gosleuth/gosleuth/internal/termsafe"
)

func init() {
	register(&command{
		Name:  "probe",
		Usage: "probe --pid PID [--duration 2s] [--budget 1%] (--recipe NAME ... | FUNC ...) [--format text|json] [-o FILE]",
		Short: "count calls of Go functions in a running process, with their callers and arguments (entry uprobes)",
		Long: `Puts entry uprobes on Go functions of a running process, found in its own
function table (stripped binaries too), and counts every call in the window,
samples the callers' stacks and reads one argument register. Needs root and
a kernel with BPF uprobe_multi links; never uses return probes.

A governor is on by default: a 100 ms count-only pre-flight measures each
function's call rate, and one that would cost the target more than --budget
of a CPU through the window is probed in bursts (attached for part of the
window, detached in between, the duty cycle chosen to keep within the
budget): its counts are then estimates scaled from the bursts, said so with
the duty cycle and a margin. One too hot even for two 5 ms bursts is not
probed ("too hot to probe"). The window ends early when the budget is spent. Recipes: ` + strings.Join(probe.RecipeNames(), ", ") + `.
A FUNC may end in :AX, :BX, :CX or :R14 to read that register.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &probeFlags{}
			fs.IntVar(&f.pid, "pid", 0, "the Go process `PID`")
			fs.DurationVar(&f.duration, "duration", 2*time.Second, "length of the `window`")
			fs.StringVar(&f.budget, "budget", "1%", "target CPU the probes may cost, in `percent` of one CPU (0 turns the governor off)")
			fs.Var(&f.recipes, "recipe", "a recipe `NAME` (comma list or repeated): "+strings.Join(probe.RecipeNames(), ", "))
			fs.StringVar(&f.format, "format", "text", "output `format`: text or json")
			fs.StringVar(&f.out, "o", "", "write the result to `FILE`, completely or not at all (- for stdout)")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.StringVar(&f.attach, "attach", "auto", "how probes attach, a `mechanism`: auto (a uprobe_multi link where the kernel has them, else perf; tracefs when BPF is refused), multi, perf (one uprobe perf event per function) or tracefs (no BPF: calls only)")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runProbe(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// probeFlags are the flags of "gosleuth probe".
type probeFlags struct {
	pid      int
	duration time.Duration
	budget   string
	recipes  stringList
	format   string
	out      string
	procRoot string
	attach   string
}

// stringList is a flag that takes a comma list or is repeated.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// parseBudget reads "1%", "0.5%" or "0".
func parseBudget(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, usagef("--budget must be a percentage of one CPU between 0%% and 100%%, got %q", s)
	}
	return v / 100, nil
}

// probeArgs turns the command line into probes: recipes, then FUNC[:REG].
func probeArgs(recipes, funcs []string) ([]probe.Probe, []probe.Recipe, error) {
	var ps []probe.Probe
	var rs []probe.Recipe
	for _, name := range recipes {
		r, ok := probe.Recipes[name]
		if !ok {
			return nil, nil, usagef("unknown recipe %q (recipes: %s)", name, strings.Join(probe.RecipeNames(), ", "))
		}
		rs = append(rs, r)
		ps = append(ps, r.Probes...)
	}
	for _, a := range funcs {
		fn, reg, _ := strings.Cut(a, ":")
		p := probe.Probe{Func: fn, Stacks: true}
		switch strings.ToUpper(reg) {
		case "":
		case "AX":
			p.Arg = probe.RAX
		case "BX":
			p.Arg = probe.RBX
		case "CX":
			p.Arg = probe.RCX
		case "R14":
			p.Arg = probe.R14
		default:
			return nil, nil, usagef("%q: the register must be AX, BX, CX or R14", a)
		}
		if fn == "" || strings.ContainsAny(fn, " \t") {
			return nil, nil, usagef("%q is not a Go function name", a)
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, nil, usagef("give --recipe NAME or the functions to probe")
	}
	// A function asked for twice is probed once, with the most asked of it.
	seen := map[string]int{}
	var out []probe.Probe
	for _, p := range ps {
		if i, ok := seen[p.Func]; ok {
			out[i].Stacks = out[i].Stacks || p.Stacks
			if out[i].Arg == probe.RegNone {
				out[i].Arg = p.Arg
			}
			continue
		}
		seen[p.Func] = len(out)
		out = append(out, p)
	}
	return out, rs, nil
}

// runProbe is "gosleuth probe" once its flags are parsed.
func runProbe(ctx context.Context, f *probeFlags, args []string, stdout, stderr io.Writer) error {
	if f.pid <= 0 {
		return usagef("give --pid PID of a Go process")
	}
	if f.duration <= 0 || f.duration > time.Hour {
		return usagef("--duration must be positive and at most 1h, got %s", f.duration)
	}
	if f.format != "text" && f.format != "json" {
		return usagef("--format must be text or json, got %q", f.format)
	}
	attach := f.attach
	switch attach {
	case "auto":
		attach = probe.AttachAuto
	case probe.AttachMulti, probe.AttachPerf, probe.AttachTracefs:
	default:
		return usagef("--attach must be auto, multi, perf or tracefs, got %q", f.attach)
	}
	budget, err := parseBudget(f.budget)
	if err != nil {
		return err
	}
	if budget == 0 {
		budget = -1 // off
	}
	probes, recipes, err := probeArgs(f.recipes, args)
	if err != nil {
		return err
	}
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return err
		}
	}
	if runtime.GOOS != "linux" {
		return probe.ErrNotSupported
	}
	if err := checkTargets(f.procRoot, f.pid); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("probe needs root (entry uprobes need CAP_PERFMON and CAP_BPF)")
	}
	res, err := probe.Run(ctx, proc.NewFS(f.procRoot), f.pid, probes, probe.Options{Duration: f.duration, Budget: budget, Attach: attach})
	if errors.Is(err, probe.ErrAbsent) {
		names := make([]string, len(probes))
		for i, p := range probes {
			names[i] = p.Func
		}
		return fmt.Errorf("probe process %d: %s: %w", f.pid, strings.Join(names, ", "), probe.ErrAbsent)
	}
	if err != nil {
		return fmt.Errorf("probe process %d: %w", f.pid, err)
	}
	target := profileview.TargetOf(proc.NewFS(f.procRoot), f.pid)
	answers := map[string][]string{}
	for _, r := range recipes {
		answers[r.Name] = r.Statements(res)
	}
	write := func(w io.Writer) error {
		if f.format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				*probe.Result
				Recipes   map[string][]string `json:"recipes,omitempty"`
				NSPID     int                 `json:"nspid,omitempty"`
				Container *proc.Container     `json:"container,omitempty"`
			}{res, answers, target.NSPID, target.Container})
		}
		return writeProbeText(w, res, recipes, answers, target)
	}
	if f.out != "" {
		return atomicfile.Write(f.out, write)
	}
	return write(stdout)
}

// probeKind says how a probe ran and what each call cost the target:
// the kernel emulates a probe on a PUSHQ BP and single-steps any other
// instruction out of line (docs/probe.md, Cost).
func probeKind(kind string) string {
	switch kind {
	case probe.Emulated.String():
		return "emulated probe, about 0.9 µs a call"
	case probe.SingleStepped.String():
		return "single-stepped probe, about 10 µs a call"
	}
	return kind
}

// writeProbeText writes the result like perf report's caller view: each
// function, its calls, then its callers by share with their stacks.
func writeProbeText(w io.Writer, r *probe.Result, recipes []probe.Recipe, answers map[string][]string, target profileview.Target) error {
	var b strings.Builder
	fmt.Fprintf(&b, "gosleuth probe: pid %d (%s), %.2fs, %s\n", r.PID, r.GoVersion, r.Seconds, r.Mechanism)
	if l := target.Line(); l != "" {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "attach %.1f ms, detach %.1f ms; estimated cost %.2f%% of a CPU\n\n", r.AttachMS, r.DetachMS, 100*r.CostCPU)
	for _, f := range r.Funcs {
		if f.Skipped != "" {
			// The reason may already start with the function's name.
			fmt.Fprintf(&b, "%s: %s\n\n", f.Func, strings.TrimPrefix(f.Skipped, f.Func+": "))
			continue
		}
		if s := f.Sampled; s != nil {
			// Probed in bursts: the count is an estimate.
			fmt.Fprintf(&b, "%s  ~%d calls, %.0f ± %.0f/s, sampled: %s, attached %.1f%% of the window, %d calls counted  [%s",
				f.Func, f.Count, f.PerSec, s.PerSecMargin, s.BurstsText(), 100*s.Duty, s.Counted, probeKind(f.Kind))
		} else {
			fmt.Fprintf(&b, "%s  %d calls, %.0f/s  [%s", f.Func, f.Count, f.PerSec, probeKind(f.Kind))
		}
		if f.Symbol != f.Func {
			fmt.Fprintf(&b, ", as %s", f.Symbol)
		}
		if f.StackEvery > 1 {
			fmt.Fprintf(&b, ", stacks 1 in %d", f.StackEvery)
		}
		b.WriteString("]\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, c := range f.Callers {
			loc := ""
			if c.File != "" {
				loc = fmt.Sprintf("%s:%d", c.File, c.Line)
			}
			fmt.Fprintf(tw, "  %5.1f%%\t%s\t%s\n", 100*c.Share, c.Func, loc)
			if len(c.Stack) > 1 {
				fmt.Fprintf(tw, "  \t  <- %s\t\n", strings.Join(c.Stack[1:], " <- "))
			}
		}
		tw.Flush()
		for i, a := range f.Args {
			if i == 5 {
				fmt.Fprintf(&b, "  %s: %d more values\n", f.Arg, len(f.Args)-5)
				break
			}
			fmt.Fprintf(&b, "  %s = %#x (%d)  %.1f%%\n", f.Arg, a.Value, a.Value, 100*a.Share)
		}
		b.WriteString("\n")
	}
	for _, rc := range recipes {
		fmt.Fprintf(&b, "%s:\n", rc.Name)
		if len(answers[rc.Name]) == 0 {
			b.WriteString("  nothing seen\n")
		}
		for _, a := range answers[rc.Name] {
			fmt.Fprintf(&b, "  %s\n", a)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, termsafe.String(b.String())) // names come from the target's binary
	return err
}
