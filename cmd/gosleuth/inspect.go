package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/inspect"
)

func init() {
	register(&command{
		Name:  "inspect",
		Usage: "inspect --pid PID [--duration 10s] [--format text|json] [--pprof-url URL | --metrics-url URL]",
		Short: "Go runtime view of one process: build, GOMAXPROCS, GC, scheduler, goroutines by stack",
		Long: `
Shows what gosleuth can tell about a process from outside (Go version, main
module, build settings, the GOMAXPROCS it runs with and why, allowed CPUs,
cgroup CPU limit and throttling, /proc CPU, RSS, threads, wake-ups) and, when
it can read the runtime, what happened over the window: goroutines (count,
created/s, by state), GC cycles/s and pauses, GC CPU and mark-assist share of
busy CPU (over at least 2 GC cycles), heap live/objects/goal, scannable bytes,
scheduling latency p50/p99, mutex wait per second, GODEBUG non-default events,
and the goroutine dump grouped by identical stacks, largest groups first.

The runtime is read from --metrics-url (a Prometheus client_golang /metrics
page) or --pprof-url (a net/http/pprof endpoint, with expvar /debug/vars when
served), else from the program's gosleuth agent (import
github.com/gosleuth/gosleuth/agent; found by PID), else from its memory. For
any Go program it may read (root, or the same user where ptrace is allowed),
inspect also reads the runtime's own books from memory at the window's end,
without stopping it: goroutines by state, start function and creation site
with the stack memory they hold, GC state against its goal and limit, the
scheduler, timers and the heap profile's top sites; the goroutine dump then
comes from memory too (--dump-from source takes the source's, which stops
the process). Unknown figures are omitted in text and null in JSON. Ctrl-C
ends the window early.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &inspectFlags{}
			fs.IntVar(&f.pid, "pid", 0, "process `PID` to inspect (required)")
			fs.DurationVar(&f.duration, "duration", 10*time.Second, "window `length`")
			fs.StringVar(&f.format, "format", "text", "output `format`: text or json")
			fs.StringVar(&f.pprofURL, "pprof-url", "", "net/http/pprof endpoint `URL` of the process (http://HOST:PORT)")
			fs.StringVar(&f.metricsURL, "metrics-url", "", "Prometheus /metrics `URL` of the process")
			fs.IntVar(&f.groups, "groups", 10, "goroutine groups to show (0: no dump)")
			fs.IntVar(&f.dumpMax, "dump-max", inspect.DefaultDumpMax, "take the goroutine dump only when the process has at most `N` goroutines (it stops the process for ~3 µs each; -1: no limit)")
			fs.StringVar(&f.dumpFrom, "dump-from", "memory", "the goroutine dump's `origin`: memory (no pause) or source (the agent's or pprof's, which stops the process)")
			fs.StringVar(&f.root, "proc", "/proc", "procfs mount `path`")
			fs.StringVar(&f.out, "o", "", "write the report (in --format) to `FILE`, completely or not at all")
			fs.StringVar(&f.trace, "trace", "", "write the agent's FlightRecorder snapshot (execution trace of the last seconds) to `FILE` at the end of the window")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runInspect(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// inspectFlags are the flags of "gosleuth inspect".
type inspectFlags struct {
	pid        int
	duration   time.Duration
	format     string
	pprofURL   string
	metricsURL string
	dumpFrom   string
	groups     int
	dumpMax    int
	root       string
	out        string
	trace      string
}

// runInspect is "gosleuth inspect" once its flags are parsed.
func runInspect(ctx context.Context, f *inspectFlags, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0:
		return usagef("inspect takes no arguments (got %q); use --pid", args[0])
	case f.pid <= 0:
		return usagef("--pid is required and must be positive")
	case f.duration < 100*time.Millisecond:
		return usagef("--duration must be at least 100ms, got %s", f.duration)
	case f.format != "text" && f.format != "json":
		return usagef("--format must be text or json, got %q", f.format)
	case f.groups < 0:
		return usagef("--groups must not be negative")
	case f.duration > time.Hour:
		return usagef("--duration must be at most 1h, got %s", f.duration)
	case f.pprofURL != "" && f.metricsURL != "":
		return usagef("give --pprof-url or --metrics-url, not both")
	case f.dumpFrom != "memory" && f.dumpFrom != "source":
		return usagef("--dump-from must be memory or source, got %q", f.dumpFrom)
	}
	if err := checkURLs(f.pprofURL, f.metricsURL); err != nil {
		return err
	}
	for _, p := range []string{f.out, f.trace} {
		if p != "" {
			if err := atomicfile.CheckWritable(p); err != nil {
				return err
			}
		}
	}
	if runtime.GOOS != "linux" {
		return errors.New("inspect reads /proc and runs on Linux only")
	}
	if err := checkTargets(f.root, f.pid); err != nil {
		return err
	}
	if err := checkURLOwners(stderr, f.root, f.pid, f.pprofURL, f.metricsURL); err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	g := f.groups
	if g == 0 {
		g = -1
	}
	rep, err := inspect.Run(ctx, inspect.Options{PID: f.pid, Duration: f.duration,
		ProcRoot: f.root, PprofURL: f.pprofURL, MetricsURL: f.metricsURL, Groups: g, DumpMax: f.dumpMax, TracePath: f.trace, DumpFromSource: f.dumpFrom == "source"})
	if err != nil {
		return err
	}
	write := rep.WriteText
	if f.format == "json" {
		write = rep.WriteJSON
	}
	if f.out != "" {
		err = atomicfile.Write(f.out, write)
	} else {
		err = write(stdout)
	}
	if err == nil && rep.TraceErr != nil {
		// The trace was asked for: not writing it is a failure.
		err = rep.TraceErr
	}
	return err
}
