package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/window"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/doctor"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

func init() {
	register(&command{
		Name:  "doctor",
		Usage: "doctor [--pid PID ...] [--duration 10s] [--format text|json|markdown] [-o FILE] [--src auto|DIR|off]",
		Short: "find what is wrong: findings with evidence, cause and fix",
		Long: `Watches every process on the host (or the ones given with --pid) for the
duration through /proc, then takes a closer look (syscall mix, stack samples,
runtime metrics, whichever are available) at the processes that look
suspicious and at Go processes with non-trivial CPU or wake-ups. Each finding
carries the numbers behind it, the cause and the fix; rules that could not be
decided are listed with what they need. Without root, the report rests on
/proc alone and says so.

Where a GC, heap or goroutine-memory finding names allocation sites and the
program's source is at hand (--src auto: the main package's directory named
by the binary, when it exists here and belongs to root or the program's
owner), the compiler's escape analysis runs with the program's Go release
after the window, and each site gets the reason its value is on the heap and
the usual fix.

Rule ids: ` + ruleIDs(),
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &doctorFlags{}
			fs.Var(&f.pids, "pid", "examine only this `PID` (comma list or repeated)")
			fs.DurationVar(&f.duration, "duration", 10*time.Second, "length of the observation `window`")
			fs.StringVar(&f.format, "format", "text", "report `format`: text, json or markdown")
			fs.StringVar(&f.out, "o", "", "write the report to `FILE` (written completely or not at all)")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.IntVar(&f.maxLooks, "max-looks", 4, "on a whole-host run, look closely at most at `N` processes (0: /proc only, with --pid too)")
			fs.StringVar(&f.pprofURL, "pprof-url", "", "read runtime metrics of the one --pid from this net/http/pprof `URL`")
			fs.StringVar(&f.metricsURL, "metrics-url", "", "read runtime metrics of the one --pid from this Prometheus /metrics `URL`")
			fs.StringVar(&f.src, "src", "auto", "the program's module source `DIR` for the escape reasons of allocation sites (auto: from the binary's source paths; off: none)")
			fs.StringVar(&f.failOn, "fail-on", "", "exit with status 3 when a finding reaches this `severity` (warn or critical): a deploy gate")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runDoctor(ctx, f, args, stdout, stderr)
			}
		},
	})
}

// doctorFlags are the flags of "gosleuth doctor".
type doctorFlags struct {
	pids       pidList
	duration   time.Duration
	format     string
	out        string
	procRoot   string
	maxLooks   int
	pprofURL   string
	metricsURL string
	failOn     string
	src        string
}

// runDoctor is "gosleuth doctor" once its flags are parsed.
func runDoctor(ctx context.Context, f *doctorFlags, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		return usagef("doctor takes no arguments (got %q); use --pid", args[0])
	}
	if f.duration <= 0 {
		return usagef("--duration must be positive, got %v", f.duration)
	}
	if f.duration > time.Hour {
		return usagef("--duration must be at most 1h, got %v", f.duration)
	}
	if f.maxLooks < 0 {
		return usagef("--max-looks must not be negative")
	}
	if f.src == "" {
		return usagef("--src must be auto, off or a directory")
	}
	if min := minLookWindow(len(f.pids) > 0); f.maxLooks > 0 && f.duration < min {
		return usagef("--duration %s is too short for the close looks (syscall counts, stacks, runtime, probes), which decide the causes: give at least %s%s, or --max-looks 0 for a report from /proc alone",
			f.duration, min, map[bool]string{true: " with --pid", false: " on the whole host (2s with --pid)"}[len(f.pids) > 0])
	}
	if (f.pprofURL != "" || f.metricsURL != "") && len(f.pids) != 1 {
		return usagef("--pprof-url and --metrics-url need exactly one --pid")
	}
	if err := checkURLs(f.pprofURL, f.metricsURL); err != nil {
		return err
	}
	switch f.format {
	case "text", "json", "markdown":
	default:
		return usagef("--format must be text, json or markdown, got %q", f.format)
	}
	var gate doctor.Severity
	if f.failOn != "" {
		var err error
		if gate, err = doctor.ParseSeverity(f.failOn); err != nil || gate == doctor.Info {
			return usagef("--fail-on must be warn or critical, got %q", f.failOn)
		}
	}
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return err
		}
	}
	if err := checkTargets(f.procRoot, f.pids...); err != nil {
		return err
	}
	if len(f.pids) == 1 {
		if err := checkURLOwners(stderr, f.procRoot, f.pids[0], f.pprofURL, f.metricsURL); err != nil {
			return fmt.Errorf("doctor: %w", err)
		}
	}
	// Two close looks side by side on one P: under 5,000 new processes a
	// second their steady cost fell from 44-45 to 33-35 ms over 11 s,
	// thread switches by a third.
	oneP()
	cfg := window.CollectConfig{Triage: doctor.Triage,
		PIDs: f.pids, Duration: f.duration, ProcRoot: f.procRoot,
		MaxLooks: f.maxLooks, Looks: doctorLooks(f.procRoot, f.pprofURL, f.metricsURL),
		// The report gives the targets' CPU as it is without gosleuth:
		// measured before and after the close looks, with a note.
		QuietCPU: true,
	}
	if f.maxLooks == 0 {
		cfg.Looks = nil // /proc only
	}
	if isTerminal(stderr) {
		cfg.Progress = func(s string) { fmt.Fprintf(stderr, "\r\x1b[K%s", termsafe.String(s)) }
	}
	ws, host, notes, err := window.Collect(ctx, cfg)
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\x1b[K")
	}
	if err != nil {
		if errors.Is(err, window.ErrNoProcess) {
			return fmt.Errorf("doctor: %w", err)
		}
		return err
	}
	if tracefs.MountedByUs() {
		notes = append(notes, "tracefs was not mounted: gosleuth mounted it at "+tracefsRoot()+" to count syscalls (it stays mounted)")
	}
	rep := doctor.Diagnose(ws, host, notes, len(f.pids) > 0)
	// The windows name containers from the cgroup path at every tick;
	// the names and image from the runtime's files are read once, for
	// the processes the report shows.
	for i := range rep.Processes {
		if c := rep.Processes[i].Container; c != nil {
			named := *c
			named.AddNames()
			rep.Processes[i].Container = &named
		}
	}
	if f.src != "off" {
		rep.Notes = append(rep.Notes, doctor.JoinEscapes(ctx, rep, proc.NewFS(f.procRoot), f.src)...)
	}
	var buf bytes.Buffer
	switch f.format {
	case "json":
		err = rep.WriteJSON(&buf)
	case "markdown":
		err = rep.WriteMarkdown(&buf)
	default:
		err = rep.WriteText(&buf, f.out == "" && isTerminal(stdout))
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		err = atomicfile.WriteBytes(f.out, buf.Bytes())
	} else {
		_, err = stdout.Write(buf.Bytes())
	}
	if err != nil {
		return err
	}
	if f.failOn != "" {
		if n := rep.Count(gate); n > 0 {
			return checkFailed{fmt.Sprintf("doctor: %d finding(s) at %s or above", n, gate)}
		}
	}
	return nil
}

// minLookWindow is the shortest window in which the close looks run: they
// need a second at least, and start on the whole host after triage (at 2 s
// or 30% of the window), with --pid after the first stretch in which the
// targets' CPU is measured with nothing attached (window.QuietSpan), and
// leave room for a second one after them. A shorter window would drop them and change the verdict
// (a contended mutex read as idle wake-ups).
func minLookWindow(pids bool) time.Duration {
	if pids {
		return 2 * time.Second
	}
	return 4 * time.Second
}

func ruleIDs() string {
	s := ""
	for i, r := range doctor.Rules() {
		if i > 0 {
			s += ", "
		}
		s += r.ID
	}
	return s
}

// tracefsRoot names where tracefs is mounted, for the report's note.
func tracefsRoot() string {
	root, err := tracefs.Root()
	if err != nil {
		return "?"
	}
	return root
}
