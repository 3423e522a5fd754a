package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/syscallsview"
)

func init() {
	register(&command{
		Name:  "syscalls",
		Usage: "syscalls --pid PID [--duration 10s] [--interval 1s] [--threads] [--errors] [--latency] [--only a,b] [--mode auto|exact|proc] [--format text|json]\n       gosleuth syscalls [flags] -- CMD ARGS...",
		Short: "count a process's syscalls exactly (like perf stat / strace -c, without taxing other processes)",
		Long: `
Counts every syscall of a process (all its threads, and the threads and
child processes it starts) for a window, or of a command run to completion
with "-- CMD ARGS...", and prints them like strace -c: name, count, rate/s
and % of calls, sorted by count.

As root it uses per-task perf counters on the kernel's syscall tracepoints:
the counts are the kernel's own, only the target pays for them (about the
cost perf stat adds per syscall), and other processes are not slowed. It
needs one descriptor per syscall tracepoint (~360) and thread present at
attach; when RLIMIT_NOFILE's hard limit is too low it counts only the total.
Releasing ~360 tracepoints takes the kernel about 10 s after the report
(--only a,b counts just those, plus the total, and releases at once; an
unknown name is a usage error, and --only never falls back to /proc).

--errors adds failed calls per syscall and by errno, and --latency the time
in each syscall (total, average, p99, max), from per-thread sampling events
on raw_syscalls:sys_enter/sys_exit. They cost the target more than counting
(--latency writes two records per call; records dropped when a ring fills
are counted and shown as lost) and follow threads started later from when
gosleuth finds them (every 10 ms).

Without root it falls back to an approximate mode from /proc: read- and
write-class syscall counts (/proc/PID/io) and, sampled at 100 Hz, the
syscalls the threads wait in (/proc/PID/task/*/syscall). The output says so.

On a terminal the table is redrawn every --interval.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &syscallsFlags{}
			fs.IntVar(&f.pid, "pid", 0, "count the process `PID` (and its threads)")
			fs.DurationVar(&f.duration, "duration", 0, "counting `window` (0: 10s with --pid; with -- CMD: until it exits)")
			fs.DurationVar(&f.interval, "interval", time.Second, "live refresh `interval` on a terminal")
			fs.BoolVar(&f.threads, "threads", false, "also show each thread's own counts")
			fs.BoolVar(&f.errs, "errors", false, "also count failed calls, by errno")
			fs.BoolVar(&f.latency, "latency", false, "also time every call (total, avg, p99, max; costly)")
			fs.StringVar(&f.only, "only", "", "count only these syscalls (comma `list`), plus the total of all; needs the exact mode (root)")
			fs.StringVar(&f.mode, "mode", "auto", "`mechanism`: auto (exact, else /proc), exact (fail rather than fall back), proc")
			fs.StringVar(&f.format, "format", "text", "output `format`: text or json")
			fs.StringVar(&f.root, "proc", "/proc", "procfs mount `path`")
			fs.StringVar(&f.out, "o", "", "write the report (in --format) to `FILE`, completely or not at all (- for stdout)")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runSyscalls(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// syscallsFlags are the flags of "gosleuth syscalls".
type syscallsFlags struct {
	pid      int
	duration time.Duration
	interval time.Duration
	threads  bool
	errs     bool
	latency  bool
	only     string
	mode     string
	format   string
	root     string
	out      string
}

// runSyscalls is "gosleuth syscalls" once its flags are parsed.
func runSyscalls(ctx context.Context, f *syscallsFlags, args []string, stdout, stderr io.Writer) error {
	cfg := syscalls.Config{PID: f.pid, Command: args, Threads: f.threads, Errors: f.errs, Latency: f.latency,
		Mode: f.mode, ProcRoot: f.root, Stdin: os.Stdin}
	o := syscallsview.Options{Interval: f.interval, JSON: f.format == "json"}
	if err := checkSyscallsFlags(&cfg, &o, f.duration, f.format, f.only); err != nil {
		return err
	}
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return err
		}
		o.Out = func(write func(io.Writer) error) error { return atomicfile.Write(f.out, write) }
	}
	if runtime.GOOS != "linux" {
		return errors.New("syscalls needs Linux")
	}
	if cfg.PID > 0 {
		if err := checkTargets(f.root, cfg.PID); err != nil {
			return err
		}
	}
	o.Live = !o.JSON && isTerminal(stdout)
	if err := syscallsview.Run(ctx, cfg, o, stdout, stderr); err != nil {
		return fmt.Errorf("syscalls: %w", err)
	}
	return nil
}

// checkSyscallsFlags validates the command line and completes cfg.
func checkSyscallsFlags(cfg *syscalls.Config, o *syscallsview.Options, duration time.Duration, format, only string) error {
	switch {
	case cfg.PID < 0:
		return usagef("invalid pid %d", cfg.PID)
	case cfg.PID == 0 && len(cfg.Command) == 0:
		return usagef("give --pid PID or -- CMD ARGS...")
	case cfg.PID > 0 && len(cfg.Command) > 0:
		return usagef("give either --pid or a command, not both")
	case format != "text" && format != "json":
		return usagef("--format must be text or json, got %q", format)
	case o.Interval < 100*time.Millisecond:
		return usagef("--interval must be at least 100ms, got %s", o.Interval)
	case cfg.Mode != "auto" && cfg.Mode != "exact" && cfg.Mode != "proc":
		return usagef("--mode must be auto, exact or proc, got %q", cfg.Mode)
	case cfg.Mode == "proc" && (cfg.Errors || cfg.Latency || cfg.Threads):
		return usagef("--errors, --latency and --threads need the exact mode, not --mode proc")
	}
	switch {
	case duration < 0:
		return usagef("--duration must not be negative, got %s", duration)
	case duration > 24*time.Hour:
		return usagef("--duration must be at most 24h, got %s", duration)
	case duration > 0:
		cfg.Duration = duration
	case cfg.PID > 0:
		cfg.Duration = 10 * time.Second
	}
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			if s = strings.TrimSpace(s); s != "" {
				cfg.Only = append(cfg.Only, s)
			}
		}
		if len(cfg.Only) == 0 {
			return usagef("--only %q names no syscall", only)
		}
		if err := checkSyscallNames(cfg.Only); err != nil {
			return err
		}
		if cfg.Mode == "proc" {
			return usagef("--only needs the exact mode, not --mode proc (/proc has no per-syscall counts)")
		}
		// The /proc fallback cannot count by name: --only fails rather
		// than falls back and ignores it.
		cfg.Mode = "exact"
	}
	return nil
}

// checkSyscallNames is a usage error naming the first of names that is
// not a syscall of this architecture (as the kernel's tracepoints or
// strace spell it), with the nearest known name when one is close.
func checkSyscallNames(names []string) error {
	if _, ok := syscalls.Number(syscalls.HostArch, "read"); !ok {
		return nil // no table for this architecture: the kernel will say
	}
	for _, n := range names {
		if _, ok := syscalls.Number(syscalls.HostArch, n); ok {
			continue
		}
		hint := ""
		if near := nearestSyscall(n); near != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", near)
		}
		return usagef("--only: %q is not a syscall on %s%s", n, syscalls.HostArch, hint)
	}
	return nil
}

// nearestSyscall is the syscall name of this architecture within two
// edits of name, "" when there is none.
func nearestSyscall(name string) string {
	best, bestD := "", 3
	for nr := 0; nr < 1024; nr++ {
		s := syscalls.Name(syscalls.HostArch, nr)
		if strings.HasPrefix(s, "sys_") {
			continue
		}
		if d := editDistance(name, s); d < bestD {
			best, bestD = s, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
