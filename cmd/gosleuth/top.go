package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/top"
	"golang.org/x/term"
)

// pidList is a flag holding PIDs, given as a comma list or repeated.
// checkTargets returns why the first of pids cannot be watched (gone, a
// zombie, a kernel thread), worded the same by every command: "process
// 999999 not found".
func checkTargets(procRoot string, pids ...int) error {
	for _, pid := range pids {
		if err := proc.CheckTarget(procRoot, pid); err != nil {
			return err
		}
	}
	return nil
}

type pidList []int

func (p *pidList) String() string { return fmt.Sprint([]int(*p)) }

func (p *pidList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("invalid pid %q", f)
		}
		*p = append(*p, n)
	}
	return nil
}

func init() {
	register(&command{
		Name:  "top",
		Usage: "top [--pid PID] [--interval 1s] [--threads] [--tree] [--once] [--format text|json] [--count N]",
		Short: "live process and thread monitor: CPU user/sys, RSS, threads, fds, wake-ups, Go version",
		Long: `
Shows every process (or the ones given with --pid, with their threads) with
CPU split into user and system time, RSS, threads, open descriptors against
the process's own limit, wake-ups per second (voluntary context switches summed
over all threads), involuntary switches and the Go version of Go binaries. The
header shows what gosleuth itself costs. RUNQ% is the share of the interval
the process's threads were runnable but waiting for a CPU (scheduler
latency); RWSC/s counts read- and write-class syscalls per second only
(/proc/PID/io syscr+syscw), not every syscall: "gosleuth syscalls" counts
them all.

Keys: q quit, s/S or →/← change the sort column, r reverse, t tree, H threads,
K kernel threads, / filter by name or PID, Esc clear the filter, Enter focus
on the selected process, P/M/W sort by CPU/memory/wake-ups.

Without a terminal (or with --once, --format json) it prints a table or one
JSON object per interval to stdout. Reading other users' descriptors, io and
executables needs root (CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH); those cells
show '-' otherwise, and the note says which is missing.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &topFlags{}
			fs.Var(&f.pids, "pid", "watch only this `PID` and its threads (comma list or repeated)")
			fs.DurationVar(&f.interval, "interval", time.Second, "refresh `interval`")
			fs.BoolVar(&f.threads, "threads", false, "show threads as rows (default on with --pid)")
			fs.BoolVar(&f.threads, "H", false, "short for --threads")
			fs.BoolVar(&f.tree, "tree", false, "show the process tree")
			fs.BoolVar(&f.kernel, "kernel", false, "show kernel threads")
			fs.BoolVar(&f.once, "once", false, "print one table after one interval and exit")
			fs.StringVar(&f.format, "format", "text", "output `format` without a terminal: text or json (NDJSON, one object per interval)")
			fs.IntVar(&f.count, "count", 0, "stop after `N` intervals (0: run until interrupted)")
			fs.StringVar(&f.sortBy, "sort", "cpu", "sort `column`: pid, user, state, cpu, usr, sys, rss, thr, fds, wake, nvcsw, runq, sysc (RWSC/s), go, command")
			fs.StringVar(&f.filter, "filter", "", "show only processes whose name or command line contains `TEXT`, or whose PID is it")
			fs.IntVar(&f.maxFDs, "max-fds", 4096, "cap on /proc descriptors kept open between refreshes")
			fs.StringVar(&f.root, "proc", "/proc", "procfs mount `path`")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runTop(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// topFlags are the flags of "gosleuth top".
type topFlags struct {
	pids     pidList
	interval time.Duration
	threads  bool
	tree     bool
	kernel   bool
	once     bool
	format   string
	count    int
	sortBy   string
	filter   string
	maxFDs   int
	root     string
}

// runTop is "gosleuth top" once its flags are parsed.
func runTop(ctx context.Context, f *topFlags, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return usagef("top takes no arguments (got %q); use --pid", args[0])
	}
	if f.interval < 100*time.Millisecond {
		return usagef("--interval must be at least 100ms, got %s", f.interval)
	}
	if f.count < 0 {
		return usagef("--count must not be negative")
	}
	if f.maxFDs < 16 {
		return usagef("--max-fds must be at least 16")
	}
	if f.format != "text" && f.format != "json" {
		return usagef("--format must be text or json, got %q", f.format)
	}
	col, err := top.ParseColumn(f.sortBy)
	if err != nil {
		return usageError{err: err}
	}
	if runtime.GOOS != "linux" {
		return errors.New("top reads /proc and runs on Linux only")
	}
	if err := checkTargets(f.root, f.pids...); err != nil {
		return err
	}
	oneP()
	cfg := top.Config{
		Interval: f.interval,
		PIDs:     f.pids,
		View: top.View{Sort: col, Tree: f.tree, Threads: f.threads || len(f.pids) > 0,
			Kernel: f.kernel, Filter: f.filter},
		Once:        f.once,
		JSON:        f.format == "json",
		Count:       f.count,
		Interactive: isTerminal(stdout) && isTerminal(os.Stdin),
		MaxFDs:      f.maxFDs,
		Root:        f.root,
		DeniedNote:  rootDeniedNote(),
	}
	return top.Run(ctx, cfg, stdout, stderr)
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
