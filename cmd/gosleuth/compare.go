package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/compare"
	"github.com/gosleuth/gosleuth/internal/load"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// compareFlags is what "gosleuth compare" was asked to do.
type compareFlags struct {
	pidA, pidB   int
	sweep        string
	windows      int
	window       time.Duration
	warmup       time.Duration
	keep         bool
	loadURL      string
	loadB        string
	rate         string
	connections  int
	sysMode      string
	sysWindow    time.Duration
	cpus         string
	seed         uint64
	untilDecided bool
	budget       time.Duration
	decide       string
	noise        float64
	alpha        float64
	metricsA     string
	metricsB     string
	format       string
	out          string
	failOnWorse  bool
	showOutput   bool
	quiet        bool
	procRoot     string
	readyTimeout time.Duration
}

func init() {
	register(&command{
		Name: "compare",
		Usage: "compare [flags] 'COMMAND A' 'COMMAND B'\n" +
			"       gosleuth compare [flags] --pid-a PID --pid-b PID\n" +
			"       gosleuth compare [flags] --sweep NAME=v1,v2,... 'COMMAND'",
		Short: "A/B two commands, processes or parameter values under the same load, with the kernel's numbers and honest statistics",
		Long: `
Runs each side (by /bin/sh -c, so 'GOMAXPROCS=1 ./srv' works) and measures
it in windows taken in randomized ABBA order after a warm-up: CPU user and
system, wake-ups, involuntary switches, threads and peak RSS from /proc;
syscalls by kind from exact tracepoint counters (as root) in windows of
their own, because tracepoints tax the target; with --load URL --rate R,
latency percentiles of an open-loop load at the same rate on each side
(a window counts only when the rate was held within 0.5% and the generator
was not late); GC cycles and GC CPU share when the program has gosleuth's
agent or --metrics-url-a/-b. Started processes run on the same CPUs
(--cpus), one side at a time, a fresh process for each window (--keep
keeps one process a side and pauses the other). --pid-a/--pid-b compare running processes;
--sweep NAME=v1,v2 runs one command per value ({NAME} in the command is
replaced, otherwise NAME is set in the environment) and names the best.

Per metric: each side's median with a 95% interval ("± ?" below 6 windows
a side), p = min(Mann-Whitney U, Kolmogorov-Smirnov), or where the windows
are too few for those to decide Welch's t-test on logarithms (the row says
"welch"), or where the rounds pair the windows the signed-rank test of the
pairs ("paired"), corrected by Holm-Bonferroni across the metrics, the
B/A ratio with its interval, and a verdict: better, worse, same (within
--noise) or unknown (with about how many more windows would decide).
--until-decided starts at 3 windows a side and adds windows until the
--decide metrics are decided or --budget is spent. Outlier windows are
reported, never dropped. Exit status 3 with --fail-on-regression when a
metric is worse; 1 when a side fails (its windows so far are still
written).`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &compareFlags{}
			fs.IntVar(&f.pidA, "pid-a", 0, "compare the running process `PID` as A")
			fs.IntVar(&f.pidB, "pid-b", 0, "compare the running process `PID` as B")
			fs.StringVar(&f.sweep, "sweep", "", "parameter scan `NAME=v1,v2,...` of one command ({NAME} placeholder or environment variable)")
			fs.IntVar(&f.windows, "windows", 10, "CPU windows per side (with --until-decided: the most a side before the budget)")
			fs.DurationVar(&f.window, "window", 10*time.Second, "length of a window")
			fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "warm-up of each started process before its window")
			fs.BoolVar(&f.keep, "keep", false, "keep one process a side for the whole run, the other paused, instead of a fresh one for each window (for programs slow to start; a difference between the two processes is then taken for the programs')")
			fs.StringVar(&f.loadURL, "load", "", "drive each side with open-loop HTTP load on `URL` (with --rate)")
			fs.StringVar(&f.loadB, "load-b", "", "B's own load `URL` when the sides listen apart (default: --load; one URL means one side at a time)")
			fs.StringVar(&f.rate, "rate", "", "load `rate` in requests per second, the same on every side")
			fs.IntVar(&f.connections, "connections", 16, "load connections")
			fs.StringVar(&f.sysMode, "syscalls", "auto", "count syscalls by kind: auto (when root), on (fail without), off")
			fs.DurationVar(&f.sysWindow, "syscall-window", 0, "length of a syscall window (default: --window/10)")
			fs.StringVar(&f.cpus, "cpus", "", "run started sides on these `CPUs` (e.g. 1 or 0-3; default: gosleuth's own)")
			fs.Uint64Var(&f.seed, "seed", 0, "seed of the window order (0: from the clock; the report gives it)")
			fs.BoolVar(&f.untilDecided, "until-decided", false, "add windows until the --decide metrics are decided or --budget is spent")
			fs.DurationVar(&f.budget, "budget", 5*time.Minute, "time budget of --until-decided")
			fs.StringVar(&f.decide, "decide", "", "`metrics` --until-decided waits for (default cpu,wakeups, and p99 under load)")
			f.noise = 0.02
			fs.Var(fractionFlag{&f.noise}, "noise", "relative `change` within which a metric is the same: a fraction (0.02) or a percentage (2%)")
			fs.Float64Var(&f.alpha, "alpha", 0.05, "significance level after the Holm-Bonferroni correction")
			fs.StringVar(&f.metricsA, "metrics-url-a", "", "A's Prometheus /metrics `URL` for GC figures (default: gosleuth's agent, if any)")
			fs.StringVar(&f.metricsB, "metrics-url-b", "", "B's Prometheus /metrics `URL` for GC figures")
			fs.StringVar(&f.format, "format", "text", "report `format`: text, json (every window), bench (Go benchmark format for benchstat) or html (the report and every window plotted, self-contained)")
			fs.StringVar(&f.out, "o", "", "write the report to `FILE`, completely or not at all (- for stdout)")
			fs.BoolVar(&f.failOnWorse, "fail-on-regression", false, "exit 3 when any metric is worse (a CI gate)")
			fs.BoolVar(&f.showOutput, "show-output", false, "pass the commands' output through to stderr")
			fs.BoolVar(&f.quiet, "quiet", false, "no line per window on stderr")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.DurationVar(&f.readyTimeout, "ready-timeout", 10*time.Second, "how long a started server may take to accept connections")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				// Flags may follow the commands.
				var pos []string
				for len(args) > 0 {
					if strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
						if err := fs.Parse(args); err != nil {
							return usageError{err: durationHint(fs, err)}
						}
						args = fs.Args()
						continue
					}
					pos = append(pos, args[0])
					args = args[1:]
				}
				cfg, err := f.config(pos, stderr)
				if err != nil {
					return err
				}
				for _, s := range []struct {
					pid int
					url string
				}{{f.pidA, f.metricsA}, {f.pidB, f.metricsB}} {
					if s.pid > 0 {
						if err := checkURLOwners(stderr, f.procRoot, s.pid, s.url); err != nil {
							return fmt.Errorf("compare: %w", err)
						}
					}
				}
				return runCompare(ctx, f, cfg, stdout)
			}
		},
	})
}

// config turns the flags and commands into a compare.Config.
func (f *compareFlags) config(pos []string, stderr io.Writer) (compare.Config, error) {
	cfg := compare.Config{Windows: f.windows, Window: f.window, Warmup: f.warmup, Keep: f.keep,
		Syscalls: f.sysMode, SyscallWindow: f.sysWindow, Connections: f.connections, Seed: f.seed,
		UntilDecided: f.untilDecided, Budget: f.budget, ProcRoot: f.procRoot, ReadyTimeout: f.readyTimeout,
		Stats: compare.Options{Alpha: f.alpha, Noise: f.noise}}
	if f.warmup == 0 {
		cfg.Warmup = time.Nanosecond // 0 means the default: ask for none
	}
	switch f.format {
	case "text", "json", "bench", "html":
	default:
		return cfg, usagef("--format must be text, json, bench or html, got %q", f.format)
	}
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return cfg, err
		}
	}
	if f.decide != "" {
		cfg.Decide = strings.Split(f.decide, ",")
	}
	if f.cpus != "" {
		cpus, err := proc.ParseCPUList(f.cpus)
		if err != nil {
			return cfg, usagef("--cpus %q: want a CPU list such as 1 or 0-3", f.cpus)
		}
		cfg.CPUs = cpus
	}
	if f.rate != "" {
		r, err := load.ParseRate(f.rate)
		if err != nil || r == 0 {
			return cfg, usagef("--rate %q: want requests per second such as 1000 (a fixed rate, not max)", f.rate)
		}
		cfg.Rate = r
	}
	if f.connections < 1 || f.connections > load.MaxConnections {
		return cfg, usagef("--connections must be 1..%d, got %d", load.MaxConnections, f.connections)
	}
	switch {
	case f.pidA != 0 || f.pidB != 0:
		if f.pidA <= 0 || f.pidB <= 0 {
			return cfg, usagef("--pid-a and --pid-b go together, each a positive PID")
		}
		if len(pos) > 0 || f.sweep != "" {
			return cfg, usagef("--pid-a/--pid-b take no commands and no --sweep")
		}
		if f.keep {
			return cfg, usagef("--keep applies to commands compare starts, not to running processes")
		}
		cfg.Sides = []compare.Side{{Name: "A", PID: f.pidA}, {Name: "B", PID: f.pidB}}
	case f.sweep != "":
		if len(pos) != 1 {
			return cfg, usagef("--sweep takes exactly one command, got %d", len(pos))
		}
		name, list, ok := strings.Cut(f.sweep, "=")
		if !ok || name == "" || list == "" || strings.ContainsAny(name, " {}$") {
			return cfg, usagef("--sweep %q: want NAME=v1,v2,...", f.sweep)
		}
		cfg.Sweep = name
		vals := strings.Split(list, ",")
		if len(vals) < 2 {
			return cfg, usagef("--sweep %q: want at least two values", f.sweep)
		}
		for _, v := range vals {
			s := compare.Side{Name: name + "=" + v, Command: pos[0]}
			if ph := "{" + name + "}"; strings.Contains(pos[0], ph) {
				s.Command = strings.ReplaceAll(pos[0], ph, v)
			} else {
				s.Env = []string{name + "=" + v}
			}
			cfg.Sides = append(cfg.Sides, s)
		}
	default:
		if len(pos) != 2 {
			return cfg, usagef("compare takes two commands (or --pid-a/--pid-b, or --sweep and one command), got %d", len(pos))
		}
		cfg.Sides = []compare.Side{{Name: "A", Command: pos[0]}, {Name: "B", Command: pos[1]}}
	}
	if f.loadB != "" && f.loadURL == "" {
		return cfg, usagef("--load-b needs --load")
	}
	if f.loadURL != "" {
		for i := range cfg.Sides {
			cfg.Sides[i].URL = f.loadURL
		}
		if f.loadB != "" {
			if len(cfg.Sides) != 2 {
				return cfg, usagef("--load-b applies to two sides")
			}
			cfg.Sides[1].URL = f.loadB
		}
		for _, u := range []string{f.loadURL, f.loadB} {
			if u == "" {
				continue
			}
			if _, err := load.ParseURL(u); err != nil {
				return cfg, usageError{err: err}
			}
		}
	}
	cfg.MetricsURLs = []string{f.metricsA, f.metricsB}
	if f.showOutput {
		cfg.Output = stderr
	}
	if !f.quiet {
		cfg.Progress = stderr
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("%v", strings.TrimPrefix(err.Error(), compare.ErrBadInput.Error()+": "))
	}
	return cfg, nil
}

// runCompare runs the comparison and writes its report, also when the run
// stopped early with windows taken.
func runCompare(ctx context.Context, f *compareFlags, cfg compare.Config, stdout io.Writer) error {
	res, err := compare.Run(ctx, cfg)
	if errors.Is(err, compare.ErrBadInput) {
		return usagef("%v", err)
	}
	if res != nil && (err == nil || len(res.Windows) > 0) {
		write := func(w io.Writer) error {
			switch f.format {
			case "json":
				return res.WriteJSON(w)
			case "bench":
				return res.WriteBench(w)
			case "html":
				return res.WriteHTML(w)
			}
			return res.WriteText(w)
		}
		var werr error
		if f.out != "" {
			werr = atomicfile.Write(f.out, write)
		} else {
			werr = write(stdout)
		}
		if werr != nil && err == nil {
			err = fmt.Errorf("compare: write report: %w", werr)
		}
	}
	if err != nil {
		return err
	}
	if f.failOnWorse && res.Worse() {
		return checkFailed{msg: "compare: a metric is worse (--fail-on-regression)"}
	}
	return nil
}
