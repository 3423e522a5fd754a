package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/load"
)

// headerList is a repeatable --header flag.
type headerList []load.Header

func (h *headerList) String() string { return fmt.Sprint([]load.Header(*h)) }

func (h *headerList) Set(s string) error {
	v, err := load.ParseHeader(s)
	if err != nil {
		return err
	}
	*h = append(*h, v)
	return nil
}

func init() {
	register(&command{
		Name: "load",
		Usage: "load URL --rate R --duration D [--connections 50] [--method M] [--header H] [--body B]\n" +
			"                     [--step +1000/30s [--max-rate R]] [--sla p99<=15ms] [--watch PID] [--format text|json] [-o FILE] [--out-dir DIR]",
		Short: "open-loop HTTP load at a fixed rate or a step ramp, with honest percentiles and SLA search",
		Long: `
Sends requests to URL at a fixed rate (--rate, or "max" for a closed loop),
or in steps (--step +1000/30s up to --max-rate), over a fixed pool of
--connections keep-alive connections that is never exceeded. Latency is
measured from each request's intended send time (corrected for coordinated
omission) and also from the actual send. A step is marked invalid when the
generator achieved less than 99% of the target rate or its lag p99 exceeded
1 ms, so a slow client is never reported as a slow server.

The process listening on the URL's port (when local), or --watch PID, is
sampled every second: CPU user/sys, RSS, threads, context switches. A Go
target's GC clock is read from its memory every --gc-poll (10ms; reads
only, no stop), and a line says when the P99 spikes fall within its GC
cycles beyond chance, with mark assists' share of the GC's CPU there.

With --sla and --step, it ramps until the SLA fails (or errors exceed 1%, or
a step is invalid), then bisects between the last passing and the first
failing rate 3 times and reports the highest rate that meets the SLA.

--duration is required (at most 1h) and bounds the whole run. Ctrl-C stops
the run and writes the report of what ran. The exit status is 1 when every
request failed or a step is invalid (outside an SLA search), 3 when --sla is
not met, after the report is written. With --out-dir DIR: report.txt,
report.json, series.csv, latency.hlog, step-NN.hgrm and report.html (opens
offline).`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &loadFlags{}
			fs.StringVar(&f.rate, "rate", "", "requests per second, a `RATE` (5000, 5k), or max for a closed loop; the first step of a ramp")
			fs.DurationVar(&f.duration, "duration", 0, "total `duration` of the run (required, at most 1h)")
			fs.IntVar(&f.conns, "connections", 50, "connections (and workers); never exceeded")
			fs.StringVar(&f.method, "method", "GET", "request `method`")
			fs.Var(&f.headers, "header", "request header `\"Name: value\"` (repeatable)")
			fs.StringVar(&f.body, "body", "", "request `body`")
			fs.StringVar(&f.bodyFile, "body-file", "", "read the request body from `file`")
			fs.StringVar(&f.step, "step", "", "ramp: add `+RATE/DURATION` (e.g. +1000/30s)")
			fs.StringVar(&f.maxRate, "max-rate", "", "last `rate` of a ramp")
			fs.StringVar(&f.sla, "sla", "", "latency objective such as `p99<=15ms` (with --step: search the highest rate that meets it)")
			fs.IntVar(&f.watch, "watch", 0, "`PID` of the target to sample (default: the local process listening on the URL's port; -1: none)")
			fs.StringVar(&f.format, "format", "text", "report `format` on stdout: text or json")
			fs.StringVar(&f.out, "o", "", "write the report (in --format) to `FILE`, completely or not at all (- for stdout)")
			fs.StringVar(&f.outDir, "out-dir", "", "write every report file into `DIR` (created if missing)")
			fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-request `timeout`")
			fs.StringVar(&f.proto, "http", "auto", "`protocol`: auto (HTTP/1.1 for http://, ALPN for https://), http1 or h2 (h2c for http://)")
			fs.BoolVar(&f.insecure, "insecure", false, "skip TLS certificate verification")
			fs.DurationVar(&f.warmup, "warmup", 0, "`duration` dropped from the start of each step (default: 10% of the step, 1-5s)")
			fs.BoolVar(&f.quiet, "quiet", false, "no live line on stderr")
			fs.StringVar(&f.pprofURL, "pprof-url", "", "the target's net/http/pprof `URL`, for GC cycles and pauses")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path` the watched target is read through")
			fs.StringVar(&f.metricsURL, "metrics-url", "", "the target's Prometheus /metrics `URL` (client_golang go_* metrics), for GC cycles and pauses")
			fs.DurationVar(&f.maxLag, "max-lag", time.Millisecond, "a step whose generator lag p99 exceeds this `duration` is invalid")
			fs.DurationVar(&f.gcPoll, "gc-poll", load.DefaultGCPoll, "read the watched Go target's GC clock from its memory every `period`, to tie P99 spikes to GC cycles (0: off)")
			return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return runLoad(ctx, fs, f, args, stdout, stderr)
			}
		},
	})
}

// loadFlags are the flags of "gosleuth load".
type loadFlags struct {
	rate       string
	duration   time.Duration
	conns      int
	method     string
	headers    headerList
	body       string
	bodyFile   string
	step       string
	maxRate    string
	sla        string
	watch      int
	format     string
	out        string
	outDir     string
	timeout    time.Duration
	proto      string
	insecure   bool
	warmup     time.Duration
	quiet      bool
	pprofURL   string
	procRoot   string
	metricsURL string
	maxLag     time.Duration
	gcPoll     time.Duration
}

// runLoad is "gosleuth load" once its flags are parsed; fs parses the
// flags that follow the URL.
func runLoad(ctx context.Context, fs *flag.FlagSet, f *loadFlags, args []string, stdout, stderr io.Writer) error {
	// Flags may follow the URL: parse what comes after it.
	for len(args) > 1 && strings.HasPrefix(args[1], "-") {
		if err := fs.Parse(args[1:]); err != nil {
			return usageError{err: durationHint(fs, err)}
		}
		args = append(args[:1], fs.Args()...)
	}
	if len(args) != 1 {
		return usagef("load takes exactly one URL argument")
	}
	u, err := load.ParseURL(args[0])
	if err != nil {
		return usageError{err: err}
	}
	if f.rate == "" {
		return usagef("--rate is required (requests per second, or max)")
	}
	r, err := load.ParseRate(f.rate)
	if err != nil {
		return usageError{err: err}
	}
	if f.duration <= 0 {
		return usagef("--duration is required and must be positive (for example 30s)")
	}
	d := f.duration
	if d > load.MaxDuration {
		return usagef("--duration %s is above the limit of %s", d, load.MaxDuration)
	}
	if f.format != "text" && f.format != "json" {
		return usagef("--format must be text or json, got %q", f.format)
	}
	// Output paths are checked before the run: a long run must
	// not end with nowhere to write its report.
	if f.out != "" {
		if err := atomicfile.CheckWritable(f.out); err != nil {
			return err
		}
	}
	if f.outDir != "" {
		if err := os.MkdirAll(f.outDir, 0o755); err != nil {
			return fmt.Errorf("create --out-dir: %w", err)
		}
		if err := atomicfile.CheckDir(f.outDir); err != nil {
			return err
		}
	}
	if f.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	if f.conns < 1 || f.conns > load.MaxConnections {
		return usagef("--connections must be 1..%d, got %d", load.MaxConnections, f.conns)
	}
	if f.maxLag <= 0 {
		return usagef("--max-lag must be positive")
	}
	if f.warmup < 0 {
		return usagef("--warmup must not be negative")
	}
	if f.gcPoll < 0 || f.gcPoll > 0 && f.gcPoll < time.Millisecond || f.gcPoll > time.Second {
		return usagef("--gc-poll must be 0 (off) or 1ms..1s, got %s", f.gcPoll)
	}
	plan := load.Plan{Rate: r, Duration: d}
	if f.step != "" {
		if plan.Step, err = load.ParseStep(f.step); err != nil {
			return usageError{err: err}
		}
	}
	if f.maxRate != "" {
		if plan.MaxRate, err = load.ParseRate(f.maxRate); err != nil || plan.MaxRate == 0 {
			return usagef("--max-rate %q: want a rate such as 20000", f.maxRate)
		}
	}
	if f.sla != "" {
		s, err := load.ParseSLA(f.sla)
		if err != nil {
			return usageError{err: err}
		}
		plan.SLA = &s
	}
	cfg := load.Config{ProcRoot: f.procRoot, URL: u, Method: strings.ToUpper(f.method), Headers: f.headers,
		Connections: f.conns, Timeout: f.timeout, Proto: load.Proto(f.proto), Insecure: f.insecure,
		Warmup: f.warmup, MaxLag: f.maxLag, GCPoll: f.gcPoll}
	if f.gcPoll == 0 {
		cfg.GCPoll = -1
	}
	if f.bodyFile != "" {
		b, err := os.ReadFile(f.bodyFile)
		if err != nil {
			return fmt.Errorf("read --body-file: %w", err)
		}
		cfg.Body = b
	} else if f.body != "" {
		cfg.Body = []byte(f.body)
	}
	switch {
	case f.watch > 0:
		if err := checkTargets(f.procRoot, f.watch); err != nil {
			return err
		}
		cfg.Watch = f.watch
	case f.watch == 0 && load.IsLocalHost(u.Hostname()):
		port, _ := strconv.Atoi(u.Port())
		if port == 0 {
			port = map[string]int{"http": 80, "https": 443}[u.Scheme]
		}
		if pid, err := load.FindListener(f.procRoot, port); err == nil {
			cfg.Watch = pid
			fmt.Fprintf(stderr, "watching pid %d (listening on port %d)\n", pid, port)
		} else {
			fmt.Fprintf(stderr, "not watching the target: %v\n", err)
		}
	}
	if cfg.Watch > 0 {
		if err := checkURLOwners(stderr, f.procRoot, cfg.Watch, f.pprofURL, f.metricsURL); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		src, notes, err := goruntime.Connect(ctx, cfg.Watch, goruntime.Options{PprofURL: f.pprofURL, MetricsURL: f.metricsURL, ProcRoot: f.procRoot})
		for _, n := range notes {
			fmt.Fprintf(stderr, "runtime source: %s\n", n)
		}
		if err != nil {
			fmt.Fprintf(stderr, "no GC figures for pid %d: %v\n", cfg.Watch, err)
		} else {
			defer src.Close()
			cfg.GC = src
			fmt.Fprintf(stderr, "GC figures from %s %s\n", src.Kind(), src.Addr())
		}
	}
	if !f.quiet && isTerminal(stderr) {
		cfg.OnTick = func(t load.Tick) { liveLine(stderr, t) }
	}
	var rep *load.Report
	if plan.SLA != nil && plan.Step.Inc > 0 {
		rep, err = load.Search(ctx, cfg, plan)
	} else {
		rep, err = load.Run(ctx, cfg, plan)
	}
	if err != nil {
		if errors.Is(err, load.ErrBadInput) {
			return usageError{err: err}
		}
		return fmt.Errorf("load %s: %w", u.Redacted(), err)
	}
	if cfg.OnTick != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if f.outDir != "" {
		if err := rep.WriteDir(f.outDir); err != nil {
			return err
		}
	}
	write := rep.WriteText
	if f.format == "json" {
		write = func(w io.Writer) error { return rep.WriteJSON(w, false) }
	}
	if f.out != "" {
		err = atomicfile.Write(f.out, write)
	} else {
		err = write(stdout)
	}
	if err != nil {
		return err
	}
	if f.sla != "" && rep.SLAFailed() {
		return checkFailed{fmt.Sprintf("load %s: the SLA %s was not met", u.Redacted(), f.sla)}
	}
	if why := loadFailure(rep); why != "" {
		return fmt.Errorf("load %s: %s (the report says more)", u.Redacted(), why)
	}
	return nil
}

// loadFailure says why a run that ran to its end did not measure the
// target (exit 1): every request failed, or a step was marked invalid
// (outside an SLA search, where an invalid step is one of the search's
// outcomes). A step the user interrupted is judged on what it did.
func loadFailure(rep *load.Report) string {
	var reqs, errs int64
	for _, s := range rep.Steps {
		reqs += s.Requests
		errs += s.Errors
	}
	if reqs > 0 && errs == reqs {
		return fmt.Sprintf("all %d requests failed", reqs)
	}
	if rep.SLA != nil {
		return ""
	}
	for i, s := range rep.Steps {
		if !s.Valid && !s.Interrupted {
			why := "invalid"
			if len(s.Invalid) > 0 {
				why = s.Invalid[0]
			}
			return fmt.Sprintf("step %d is invalid: %s", i+1, why)
		}
	}
	return ""
}

// liveLine rewrites one status line on a terminal.
func liveLine(w io.Writer, t load.Tick) {
	target := "max"
	if t.TargetRate > 0 {
		target = strconv.FormatFloat(t.TargetRate, 'f', 0, 64)
	}
	fmt.Fprintf(w, "\r\033[K%6.0fs step %d  %6.0f/%s req/s  p50 %.2fms  p99 %.2fms  errors %d  lag p99 %.2fms  conns %d",
		t.T, t.Step, t.Rate, target, t.Latency.P50, t.Latency.P99, t.Errors, t.Lag.P99, t.Connections)
}
