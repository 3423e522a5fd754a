package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/gosleuth/gosleuth/internal/export"
)

// exporterFlags is what "gosleuth exporter" was asked to do.
type exporterFlags struct {
	listen    string
	interval  time.Duration
	idleEvery time.Duration
	groupBy   string
	maxSeries int
	topN      int
	procRoot  string
	runtime   bool
	bpf       bool
	// The doctor's whole-host runs.
	doctorEvery  time.Duration
	doctorWindow time.Duration
	doctorLooks  int
}

func init() {
	register(&command{
		Name:  "exporter",
		Usage: "exporter [--listen 127.0.0.1:9467] [--interval 1s] [--group-by unit,container,exe] [--max-series 5000] [--top 20] [--doctor-every 5m] [--proc ROOT]",
		Short: "Prometheus metrics of every process group of the host: CPU, wake-ups, switches, memory, descriptors",
		Long: `
Serves /metrics in the Prometheus exposition format and a page at / saying
what it exports. Every --interval, every process of the host is read once in
the background (the /proc engine keeps its files open and reads only what
moved, or as root reads the threads' scheduler counters through a BPF task
iterator: every task once in --idle-every, in between those that ran lately,
--bpf); a scrape only writes the last sample, so its cost grows with the
series, not with processes x files.

Series are per group of processes, not per PID: a systemd unit (from the
cgroup path), else a container or pod (from the cgroup path; no runtime API
is asked), else the command name (the kernel's comm, at most 15 characters:
"prometheus-node" for prometheus-node-exporter; --group-by sets the order).
Per group:
CPU seconds by mode, wake-ups (voluntary switches summed over all threads,
which no other exporter gives: the cost of timers and polling at idle),
involuntary switches, processes, threads, RSS, open descriptors, the worst
descriptor/limit ratio and Go versions. Counters stay monotonic when
processes exit. PIDs appear only on gosleuth_process_info for the --top
processes by CPU, re-ranked at most once a minute. About 10 series per
group; groups first seen beyond --max-series are counted in group "other".

Every --doctor-every (0: never) the doctor runs over the whole host for
--doctor-window, looking closely at --doctor-looks processes at most (stack
samples and syscall counts: while syscalls are counted, every task of the
host pays the kernel's tracing slow path, so keep the window short: 4s at
least, which the close looks need), and
each finding is exported as gosleuth_finding{id, severity, pid, comm, group}
= 1 until the next run, with gosleuth_finding_cpu_cores where the doctor can
put its cost as CPU.

With --runtime (the default), Go processes also give their runtime, from
gosleuth's agent where it runs, else from their memory: runtime/metrics,
named as client_golang's Go collector names them under the prefix gosleuth_
(gosleuth_go_gc_cycles_total_gc_cycles_total...) and summed per group;
counters count what was added while watched.

It listens on loopback unless --listen names another address (for a fleet:
--listen :9467); the metrics carry command names, never command lines.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &exporterFlags{}
			fs.StringVar(&f.listen, "listen", "127.0.0.1:9467", "`address` to listen on")
			fs.DurationVar(&f.interval, "interval", time.Second, "sampling `period`")
			fs.DurationVar(&f.idleEvery, "idle-every", 5*time.Second, "check a thread that has not run for this `duration` only once per duration (at most: counters exact, up to this late; the sampling period: every thread every time)")
			fs.StringVar(&f.groupBy, "group-by", "unit,container,exe", "group `kinds` tried in order")
			fs.IntVar(&f.maxSeries, "max-series", 5000, "cap on group series (about 10 per group)")
			fs.IntVar(&f.topN, "top", 20, "processes by CPU named with their PID")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.BoolVar(&f.bpf, "bpf", true, "read threads' scheduler and switch counts through a BPF task iterator where allowed (root), else files: every task once in --idle-every and in between the processes that ran lately (one bpf(2) call) and new ones; about half the CPU of the files' idle back-off, for about 4 MB more RSS (the kernel's BTF, read once); --bpf=false: files only")
			fs.BoolVar(&f.runtime, "runtime", true, "read the Go runtime of Go processes, from gosleuth's agent where it runs, else from the process's memory (gosleuth_go_* series per group)")
			fs.DurationVar(&f.doctorEvery, "doctor-every", 5*time.Minute, "run the doctor over the host once per `duration` (0: never; else at least 1m)")
			fs.DurationVar(&f.doctorWindow, "doctor-window", 10*time.Second, "the doctor's observation `window` (at least 4s with close looks)")
			fs.IntVar(&f.doctorLooks, "doctor-looks", 2, "close looks per doctor run at most (0: /proc only)")
			return func(ctx context.Context, args []string, _, stderr io.Writer) error {
				if len(args) > 0 {
					return usagef("exporter takes no arguments (got %q)", args[0])
				}
				return runExporter(ctx, f, stderr, nil)
			}
		},
	})
}

// runExporter serves the metrics until ctx ends; ready, when set, receives
// the address listened on.
func runExporter(ctx context.Context, f *exporterFlags, stderr io.Writer, ready chan<- string) error {
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return usagef("--listen %q: want HOST:PORT (127.0.0.1:9467, or :9467 for every address)", f.listen)
	}
	if f.interval < 100*time.Millisecond || f.interval > time.Hour {
		return usagef("--interval must be between 100ms and 1h, got %s", f.interval)
	}
	if f.idleEvery < f.interval || f.idleEvery > time.Hour {
		return usagef("--idle-every must be between --interval (%s) and 1h, got %s", f.interval, f.idleEvery)
	}
	if f.maxSeries < 10 {
		return usagef("--max-series must be at least 10, got %d", f.maxSeries)
	}
	if f.topN < 0 || f.topN > 1000 {
		return usagef("--top must be between 0 and 1000, got %d", f.topN)
	}
	if f.doctorEvery != 0 && (f.doctorEvery < time.Minute || f.doctorWindow < time.Second || f.doctorWindow > f.doctorEvery/2) {
		return usagef("--doctor-every must be 0 or at least 1m, and --doctor-window between 1s and half of it (got %s and %s)", f.doctorEvery, f.doctorWindow)
	}
	if min := minLookWindow(false); f.doctorEvery != 0 && f.doctorLooks > 0 && f.doctorWindow < min {
		return usagef("--doctor-window %s is too short for the doctor's close looks, which decide the causes: give at least %s, or --doctor-looks 0 for findings from /proc alone", f.doctorWindow, min)
	}
	if f.doctorLooks < 0 {
		return usagef("--doctor-looks must not be negative")
	}
	kinds, err := export.ParseGroupBy(f.groupBy)
	if err != nil {
		return usagef("%v", err)
	}
	if runtime.GOOS != "linux" {
		return errors.New("exporter reads /proc and runs on Linux only")
	}
	oneP()
	// The port is taken first: one in use fails at once, and a scrape
	// that comes while the reader is set up (the kernel's BTF for the
	// task iterator: seconds on a saturated host) waits in the listen
	// backlog instead of being refused.
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("exporter: listen: %w", err)
	}
	defer ln.Close()
	e, err := export.New(export.Config{ProcRoot: f.procRoot, Interval: f.interval, GroupBy: kinds,
		TopN: max(f.topN, 0), MaxGroups: max(f.maxSeries/10, 1), Runtime: f.runtime,
		IdleBackoff: int(f.idleEvery / f.interval), BPF: f.bpf})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan error, 1)
	go func() { sampled <- e.Run(ctx) }()
	if f.doctorEvery > 0 {
		dc := export.DoctorConfig{Every: f.doctorEvery, Window: f.doctorWindow, MaxLooks: f.doctorLooks}
		if f.doctorLooks > 0 {
			dc.Looks = doctorLooks(f.procRoot, "", "")
		}
		go e.RunDoctor(ctx, dc)
	}
	// Scrapes wait in the listen backlog until the first sample is
	// published: one before it would get an error page.
	select {
	case <-e.Published():
	case err := <-sampled:
		return err
	case <-ctx.Done():
		return nil
	}
	hs := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "gosleuth exporter: serving http://%s/metrics\n", ln.Addr())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case err := <-sampled:
		hs.Close()
		if err != nil {
			return err
		}
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	hs.Shutdown(sctx)
	return nil
}
