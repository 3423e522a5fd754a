package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"

	"github.com/gosleuth/gosleuth/internal/allocview"
	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/profileview"
	"github.com/gosleuth/gosleuth/internal/stacks"
	"golang.org/x/term"
)

func init() {
	register(&command{
		Name:  "profile",
		Usage: "profile (--pid PID | -- CMD ARGS...) [--duration 30s] [--hz 99] [-o profile.pb.gz] [--folded FILE] [--flame FILE.html] [--format text|json|pprof] [--off-cpu]\n       profile --type heap|allocs --pid PID [--duration 30s] [-o FILE] [--format text|json|pprof] [--src DIR|auto]",
		Short: "sample user and kernel stacks of a process, or read a Go program's allocations: pprof file, flame graph, runtime classes",
		Long: `
Samples the call stacks of every thread of a running process (or of CMD,
from its first instruction) with perf_event cpu-clock events at --hz per
thread, user and kernel frames, and symbolizes them from the binary: Go
functions from pclntab, inlined calls included, even in stripped or PIE
binaries; C functions from ELF symbols; the kernel from /proc/kallsyms.

It prints sampled CPU against the process's utime+stime from /proc over the
same window (coverage), the user/kernel split, top functions and the runtime
classes (user code, GC marking, mark assist, scheduler, syscalls by kernel
entry point, netpoll, sysmon, cgo, idle runtime threads). -o writes a pprof
profile for 'go tool pprof' (and the summary goes to stdout), or, with
--format text or json, the summary in that format (as -o does in every
command); --format pprof without -o writes the profile to stdout; --folded
folded stacks for flamegraph.pl; --flame a self-contained flame graph page.

--off-cpu adds where threads block (sched_switch at each switch-out, with
the time until the thread runs again): a second section in the summary,
samples labelled mode=offcpu in the pprof file, an [off-cpu] root in the
folded stacks and flame graph. Runtime threads waiting for work are left
out unless --off-cpu-all; goroutines that wait on channels or mutexes do it
in user space and need Go's block and mutex profiles instead.

Each thread gets its own event, found within 100 ms of its start; each 10 ms
of its CPU time gives one sample. Such an event costs its thread a few
microseconds at every context switch, so as root, when the target switches
often enough for that to exceed 1% of its CPU, sampling moves after about
0.4 s to one event per CPU filtered to the target (--events cpu from the start,
--events thread never). Kernel stacks need root (or CAP_PERFMON);
without, only user mode is sampled and each thread's system time from /proc
becomes a [kernel time, not sampled] leaf.

--type heap or allocs reads a Go program's allocation profile from the
runtime's own heap-profile buckets in its memory (no agent, no pause, no
write): heap is what is live (inuse_*), allocs what was allocated during
--duration (the difference of two readings: alloc_*, ranked by bytes/s and
objects/s). Both are as of the last completed GC, which the output says. -o
writes pprof for 'go tool pprof'; --format pprof writes it to stdout
when there is no -o. --src DIR (or auto: the source paths in the binary, where
they exist here) runs the compiler's escape analysis over the module with
the program's own Go release and attaches to each top site the compiler's
reason its value is on the heap, with a suggested change. Where the linker
turned memory profiling off (nothing in the program references the heap
profile), heap says so and allocs samples the allocator's slow path with
entry uprobes instead (root, BPF; under the probe budget), stating the
sampling's bias.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &profileFlags{}
			fs.StringVar(&f.typ, "type", "cpu", "profile `type`: cpu (sampled stacks), heap (live objects) or allocs (allocated during --duration); heap and allocs read a Go program's own books")
			fs.StringVar(&f.src, "src", "", "with --type heap|allocs: the program's module source `DIR` for the escape analysis join (auto: from the binary's source paths)")
			fs.IntVar(&f.pid, "pid", 0, "process `PID` to profile")
			fs.DurationVar(&f.duration, "duration", 30*time.Second, "how long to sample (0: until interrupted or the process exits)")
			fs.IntVar(&f.hz, "hz", 99, "samples per second of CPU per thread")
			fs.StringVar(&f.out, "o", "", "write the output in --format to `FILE` (without --format: the pprof profile, gzipped protobuf, with the text summary on stdout)")
			fs.StringVar(&f.folded, "folded", "", "write folded stacks to `FILE`")
			fs.StringVar(&f.flame, "flame", "", "write a flame graph HTML page to `FILE`")
			fs.StringVar(&f.format, "format", "", "output `format`: text or json (the summary) or pprof (the profile); default: text on stdout, pprof to -o")
			fs.IntVar(&f.top, "top", 15, "functions in the top lists")
			fs.BoolVar(&f.userOnly, "user-only", false, "sample user mode only, as without privileges")
			fs.StringVar(&f.events, "events", "auto", "sampling `events`: thread (one per thread), cpu (one per CPU, filtered to the process; root), auto (per thread, per CPU when the target switches too often)")
			fs.BoolVar(&f.offCPU, "off-cpu", false, "also sample where threads block (switch-outs; needs root; about 2 us per recorded switch)")
			fs.IntVar(&f.offEvery, "off-cpu-every", 1, "record one switch-out in `N` (each weighted N times)")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path` the target is read through")
			fs.BoolVar(&f.offAll, "off-cpu-all", false, "keep off-CPU stacks of idle runtime threads (parked Ms, sysmon, netpoller)")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runProfile(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// profileFlags are the flags of "gosleuth profile".
type profileFlags struct {
	pid      int
	duration time.Duration
	hz       int
	out      string
	folded   string
	flame    string
	format   string
	top      int
	userOnly bool
	events   string
	offCPU   bool
	offEvery int
	procRoot string
	offAll   bool
	typ      string
	src      string
}

// runProfile is "gosleuth profile" once its flags are parsed.
func runProfile(ctx context.Context, f *profileFlags, args []string, stdout, stderr io.Writer) error {
	switch f.typ {
	case "cpu":
	case allocview.Heap, allocview.Allocs:
		return runAllocProfile(ctx, f, args, stdout, stderr)
	default:
		return usagef("--type must be cpu, heap or allocs, got %q", f.typ)
	}
	if f.src != "" {
		return usagef("--src joins escape analysis to --type heap or allocs")
	}
	if err := checkProfileFormat(f.format, f.out, stdout); err != nil {
		return err
	}
	if f.hz < 1 || f.hz > 10000 {
		return usagef("--hz must be between 1 and 10000, got %d", f.hz)
	}
	if f.duration < 0 {
		return usagef("--duration must not be negative")
	}
	if f.duration > 24*time.Hour {
		return usagef("--duration must be at most 24h (0: until interrupted), got %s", f.duration)
	}
	if f.top < 1 {
		return usagef("--top must be at least 1, got %d", f.top)
	}
	if f.pid < 0 {
		return usagef("invalid pid %d", f.pid)
	}
	if (f.pid > 0) == (len(args) > 0) {
		return usagef("give either --pid PID or -- CMD ARGS...")
	}
	for _, p := range []string{f.out, f.folded, f.flame} {
		if p == "" {
			continue
		}
		if err := atomicfile.CheckWritable(p); err != nil {
			return err
		}
	}
	if f.offEvery < 1 {
		return usagef("--off-cpu-every must be at least 1")
	}
	var target profileview.Target
	if f.pid > 0 && runtime.GOOS == "linux" {
		if err := checkTargets(f.procRoot, f.pid); err != nil {
			return err
		}
		target = profileview.TargetOf(proc.NewFS(f.procRoot), f.pid)
	}
	if f.events != "auto" && f.events != "thread" && f.events != "cpu" {
		return usagef("--events must be auto, thread or cpu, got %q", f.events)
	}
	opts := stacks.Options{PID: f.pid, Hz: f.hz, Duration: f.duration, UserOnly: f.userOnly,
		PerThread: f.events == "thread", PerCPU: f.events == "cpu",
		OffCPU: f.offCPU, OffCPUEvery: f.offEvery, OffCPUAll: f.offAll, ProcRoot: f.procRoot}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		opts.Progress = func(p stacks.Progress) {
			fmt.Fprintf(stderr, "\rsampling %s: %d samples, %d threads, %d lost ", p.Elapsed.Round(time.Second), p.Samples, p.Threads, p.Lost)
		}
	}
	var cmdDone chan error
	if len(args) > 0 {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stderr, stderr
		l, err := proc.StartStopped(cmd)
		if err != nil {
			return err
		}
		opts.PID = cmd.Process.Pid
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		cmdDone = make(chan error, 1)
		opts.Started = func() {
			if err := l.Resume(); err != nil {
				cmd.Process.Kill()
			}
			go func() { cmdDone <- cmd.Wait(); cancel() }()
		}
	}
	raw, err := stacks.Sample(ctx, opts)
	if opts.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		if errors.Is(err, stacks.ErrNotFound) {
			return fmt.Errorf("process %d not found", opts.PID)
		}
		return err
	}
	if cmdDone != nil {
		var done bool
		var werr error
		if raw.Exited {
			werr, done = <-cmdDone, true // it exited: wait for the reaper
		} else {
			select {
			case werr = <-cmdDone:
				done = true
			default:
			}
		}
		if done {
			raw.Notes = append(raw.Notes, fmt.Sprintf("command %s ended (%v): the profile covers its whole run", args[0], exitText(werr)))
		} else {
			raw.Notes = append(raw.Notes, fmt.Sprintf("command %s (pid %d) was still running when sampling ended", args[0], opts.PID))
		}
	}
	p := stacks.Symbolize(raw)
	if err := writeOutputs(p, "", f.folded, f.flame); err != nil {
		return err
	}
	s := p.Summarize(f.top)
	return writeProfileOutputs(f.format, f.out, stdout, map[string]func(io.Writer) error{
		"pprof": func(w io.Writer) error {
			pp := p.PprofProfile()
			profileview.AnnotatePprof(pp, target)
			return pp.Write(w)
		},
		"json": func(w io.Writer) error { return profileview.WriteSummaryJSON(w, s, target) },
		"text": func(w io.Writer) error { return profileview.WriteSummaryText(w, s, target) },
	})
}

// checkProfileFormat checks profile's --format: text, json, pprof or
// unset; pprof bytes are not written to a terminal.
func checkProfileFormat(format, out string, stdout io.Writer) error {
	switch format {
	case "", "text", "json", "pprof":
	default:
		return usagef("--format must be text, json or pprof, got %q", format)
	}
	if format == "pprof" && out == "" {
		if fl, ok := stdout.(*os.File); ok && term.IsTerminal(int(fl.Fd())) {
			return usagef("--format pprof writes a binary profile: give -o FILE or redirect stdout")
		}
	}
	return nil
}

// writeProfileOutputs writes profile's outputs so that -o holds what
// --format names, as in every other command: with --format, its output
// goes to -o when given (stdout then stays empty), else to stdout; without
// it, -o gets the pprof profile and stdout the text summary. writers holds
// the writer of each format.
func writeProfileOutputs(format, out string, stdout io.Writer, writers map[string]func(io.Writer) error) error {
	toStdout := format
	if format == "" {
		toStdout = "text"
		if out != "" {
			if err := atomicfile.Write(out, writers["pprof"]); err != nil {
				return err
			}
		}
	} else if out != "" {
		return atomicfile.Write(out, writers[format])
	}
	return writers[toStdout](stdout)
}

// runAllocProfile is "gosleuth profile --type heap|allocs".
func runAllocProfile(ctx context.Context, f *profileFlags, args []string, stdout, stderr io.Writer) error {
	if err := checkProfileFormat(f.format, f.out, stdout); err != nil {
		return err
	}
	if len(args) > 0 || f.pid == 0 {
		return usagef("--type %s reads a running program: give --pid PID", f.typ)
	}
	if f.pid < 0 {
		return usagef("invalid pid %d", f.pid)
	}
	if f.duration < 0 || f.duration > 24*time.Hour {
		return usagef("--duration must be between 0 and 24h, got %s", f.duration)
	}
	if f.typ == allocview.Allocs && f.duration == 0 {
		return usagef("--type allocs needs a window: --duration must be more than 0")
	}
	if f.top < 1 {
		return usagef("--top must be at least 1, got %d", f.top)
	}
	if f.folded != "" || f.flame != "" || f.offCPU {
		return usagef("--folded, --flame and --off-cpu are for --type cpu")
	}
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return err
		}
	}
	if runtime.GOOS != "linux" {
		return errors.New("--type heap|allocs reads a process's memory and runs on Linux only")
	}
	if err := checkTargets(f.procRoot, f.pid); err != nil {
		return err
	}
	target := profileview.TargetOf(proc.NewFS(f.procRoot), f.pid)
	if f.typ == allocview.Allocs {
		if fl, ok := stderr.(*os.File); ok && term.IsTerminal(int(fl.Fd())) {
			fmt.Fprintf(stderr, "reading allocations over %s...\n", f.duration)
		}
	}
	r, err := allocview.Collect(ctx, allocview.Options{PID: f.pid, FS: proc.NewFS(f.procRoot), Type: f.typ,
		Duration: f.duration, Top: f.top, Src: f.src})
	if err != nil {
		if errors.Is(err, gomem.ErrNotGo) {
			return fmt.Errorf("process %d is not a Go program: --type %s reads the Go runtime's books", f.pid, f.typ)
		}
		return err
	}
	// The report names the target's container as the CPU profile's does:
	// a line under the process's, container and nspid in JSON, a comment
	// and labels in the pprof file.
	return writeProfileOutputs(f.format, f.out, stdout, map[string]func(io.Writer) error{
		"pprof": func(w io.Writer) error {
			pp := r.Pprof()
			profileview.AnnotatePprof(pp, target)
			return pp.Write(w)
		},
		"json": func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				*allocview.Report
				NSPID     int             `json:"nspid,omitempty"`
				Container *proc.Container `json:"container,omitempty"`
			}{r, target.NSPID, target.Container})
		},
		"text": func(w io.Writer) error {
			var b bytes.Buffer
			if err := allocview.WriteText(&b, r); err != nil {
				return err
			}
			_, err := w.Write(profileview.AddTargetLine(b.Bytes(), target))
			return err
		},
	})
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func writeOutputs(p *stacks.Profile, out, folded, flame string) error {
	if out != "" {
		if err := atomicfile.Write(out, p.WritePprof); err != nil {
			return err
		}
	}
	if folded != "" {
		if err := atomicfile.Write(folded, func(w io.Writer) error { return profileview.WriteFolded(w, p) }); err != nil {
			return err
		}
	}
	if flame != "" {
		if err := atomicfile.Write(flame, func(w io.Writer) error { return profileview.WriteFlameHTML(w, p) }); err != nil {
			return err
		}
	}
	return nil
}
