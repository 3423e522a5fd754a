// Command compare-stats measures how honest and how sensitive gosleuth
// compare's statistics are on this machine, with real processes (the test
// patient of internal/compare):
//
//   - aa: the same program against itself, -runs times (default 20): the
//     share of runs with any "better" or "worse" verdict (the false-alarm
//     rate; the goal is at most 5%);
//   - ticker: a 1 ms ticker against a 10 ms ticker with --until-decided
//     and compare's defaults otherwise (10 s windows, a 5 minute budget),
//     -ticker-runs times (default 3): after how many windows a side CPU
//     and wake-ups were decided (goal: at most 3);
//   - power: a server under a fixed open-loop load whose B side spins
//     3.2% longer per request (about 3% more CPU in all), -power-runs times
//     (default 10): the share of runs that call CPU worse (goal: 90%);
//   - sweep: GOMAXPROCS=1,2,8 of a light periodic fan-out: the direction
//     of CPU and futex calls and the best value;
//   - default: one run with the default protocol under load (10 windows of
//     10 s a side), timed (goal: 5 minutes);
//   - aaload: the 3% pair's A side against itself under its load at
//     compare's defaults, -aaload-runs times (default 10): the false-alarm
//     rate of the tests under load, where CPU is tested net of the load
//     generator's own CPU (compare.LoadAdjustment);
//   - noise: where the 3% pair's noise comes from: -noise-runs runs of A
//     against itself under the same load with one kept process a side
//     (--keep, -windows 4 of -window 10 s each), which split a window's
//     CPU variation into what differs from process to process of one
//     program and what differs from window to window within a process.
//
// Usage:
//
//	go run ./bench/compare-stats -reanalyze DIR   (aa-*.json and default-*.json kept by -json-dir, with this version's analysis)
//	go run ./bench/compare-stats -only noise -window 10s -windows 4 [-noise-runs 6]
//	go run ./bench/compare-stats -only default,aaload [-default-runs 10] [-aaload-runs 10] [-json-dir DIR]
//	go run ./bench/compare-stats [-only aa,ticker,power,sweep,default] [-runs 20] [-first 1] [-power-runs 10] [-ticker-runs 3] [-window 1s] [-windows 10]
//
// -window and -windows set the protocol of aa and power (the default 10 s
// windows make a run about 4 minutes long; 1 s keeps the campaign short).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/internal/compare"
)

func main() {
	only := flag.String("only", "aa,ticker,power,sweep", "campaigns to run (aa, ticker, power, sweep, default, aaload, noise)")
	runs := flag.Int("runs", 20, "runs of the self-against-self campaign")
	powerRuns := flag.Int("power-runs", 10, "runs of the 3% campaign")
	tickerRuns := flag.Int("ticker-runs", 3, "runs of the ticker campaign")
	nDefault := flag.Int("default-runs", 1, "runs of the default protocol (the 3% pair under load)")
	noiseRuns := flag.Int("noise-runs", 6, "runs of the noise campaign (two processes each)")
	aaLoadRuns := flag.Int("aaload-runs", 10, "runs of the same program against itself under load at compare's defaults")
	flag.Float64Var(&requestMS, "request-ms", 1, "work per request of the 3% pair (power, default, noise), in milliseconds of the patient's loop; the load's rate is 200/request-ms a second, so the server stays near a quarter of a core")
	first := flag.Int("first", 1, "number of the first aa or aaload run (its seed; the JSON files are numbered from it), to split a campaign over several processes")
	jsonDir := flag.String("json-dir", "", "directory to keep each aa and default run's JSON result in (every window, for re-analysis)")
	reanalyze := flag.String("reanalyze", "", "read the default runs' JSON results in this directory and compare the unpaired test with a within-block paired one on CPU, then exit")
	window := flag.Duration("window", time.Second, "window length of aa and power")
	windows := flag.Int("windows", 10, "windows a side of aa and power")
	flag.Parse()
	if *reanalyze != "" {
		reanalyzeDir(*reanalyze)
		return
	}
	dir, err := os.MkdirTemp("", "compare-stats-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "patient")
	if out, err := exec.Command("go", "build", "-o", bin, "./internal/compare/testdata/patient").CombinedOutput(); err != nil {
		fatal(fmt.Errorf("build the patient (run from the repository root): %v\n%s", err, out))
	}
	out, err := exec.Command(bin, "-calibrate").Output()
	if err != nil {
		fatal(fmt.Errorf("calibrate the patient's work loop: %w", err))
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || ns <= 0 {
		fatal(fmt.Errorf("calibrate the patient's work loop: %q", out))
	}
	itersPerMs = int(1e7 * 1e6 / ns)
	fmt.Printf("patient work loop: %d iterations a millisecond\n", itersPerMs)
	// Stopped (SIGINT, SIGTERM, SIGHUP), compare stops the servers it
	// started before the bench exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	has := func(s string) bool {
		for _, x := range strings.Split(*only, ",") {
			if x == s {
				return true
			}
		}
		return false
	}
	if has("aa") {
		aa(ctx, bin, *first, *runs, *window, *windows, *jsonDir)
	}
	if has("ticker") {
		ticker(ctx, bin, *tickerRuns)
	}
	if has("power") {
		power(ctx, bin, *powerRuns, *window, *windows)
	}
	if has("sweep") {
		sweep(ctx, bin)
	}
	if has("default") {
		defaultRuns(ctx, bin, *nDefault, *jsonDir)
	}
	if has("aaload") {
		aaLoad(ctx, bin, *first, *aaLoadRuns, *jsonDir)
	}
	if has("noise") {
		noise(ctx, bin, *noiseRuns, *window, *windows)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare-stats:", err)
	os.Exit(1)
}

// changed lists the metrics called better or worse.
func changed(r *compare.Result) []string {
	var out []string
	for _, m := range r.Metrics {
		for _, c := range m.Comparisons {
			if c.Verdict == compare.Better || c.Verdict == compare.Worse {
				out = append(out, m.Metric.Name+" "+c.Verdict)
			}
		}
	}
	return out
}

func verdict(r *compare.Result, metric string) string {
	for _, m := range r.Metrics {
		if m.Metric.Name == metric {
			return m.Comparisons[len(m.Comparisons)-1].Verdict
		}
	}
	return "absent"
}

func aa(ctx context.Context, bin string, first, runs int, window time.Duration, windows int, jsonDir string) {
	cmd := bin + " -tick 2ms -spin 50us"
	alarms, tested, paired := 0, 0, 0
	start := time.Now()
	for i := first - 1; i < first-1+runs; i++ {
		r, err := compare.Run(ctx, compare.Config{Sides: []compare.Side{{Name: "A", Command: cmd}, {Name: "B", Command: cmd}},
			Windows: windows, Window: window, Seed: uint64(i + 1)})
		if err != nil {
			fatal(err)
		}
		keepJSON(r, jsonDir, fmt.Sprintf("aa-%02d.json", i+1))
		c := changed(r)
		for _, m := range r.Metrics {
			if m.Comparisons[0].Verdict != compare.NotTested {
				tested++
			}
			if m.Comparisons[0].Paired {
				paired++
			}
		}
		if len(c) > 0 {
			alarms++
		}
		fmt.Printf("aa run %2d: %d metrics, changed: %v\n", i+1, len(r.Metrics), c)
	}
	fmt.Printf("aa: %d of %d runs with a better/worse verdict (%.0f%%; goal <= 5%%), %d metric comparisons (%d of them paired), %s\n",
		alarms, runs, 100*float64(alarms)/float64(runs), tested, paired, time.Since(start).Round(time.Second))
}

// ticker runs the ticker pair with --until-decided at compare's defaults
// (the goal is stated for them: 10 s windows, a 5 minute budget, so 14
// planned looks share the level). An earlier version used 1 s windows and
// a 1 minute budget to keep the campaign short; a 10 ms ticker's CPU in
// 1 s is a few milliseconds, too noisy to decide at 3 windows a side.
func ticker(ctx context.Context, bin string, runs int) {
	at3 := 0
	for i := range runs {
		r, err := compare.Run(ctx, compare.Config{
			Sides:        []compare.Side{{Name: "A", Command: bin + " -tick 1ms"}, {Name: "B", Command: bin + " -tick 10ms"}},
			UntilDecided: true, Seed: uint64(i + 1)})
		if err != nil {
			fatal(err)
		}
		if r.DecidedAt["cpu"] > 0 && r.DecidedAt["cpu"] <= 3 && r.DecidedAt["wakeups"] > 0 && r.DecidedAt["wakeups"] <= 3 {
			at3++
		}
		fmt.Printf("ticker run %d: decided at %v windows a side (cpu %s, wakeups %s), %d windows a side in all, %.0fs\n",
			i+1, r.DecidedAt, verdict(r, "cpu"), verdict(r, "wakeups"), r.Protocol.WindowsPerSide, r.Seconds)
	}
	fmt.Printf("ticker: CPU and wake-ups decided within 3 windows a side in %d of %d runs\n", at3, runs)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func power(ctx context.Context, bin string, runs int, window time.Duration, windows int) {
	caught := 0
	var ratios []string
	start := time.Now()
	for i := range runs {
		r := runKept(ctx, compare.Config{
			Sides: powerPair(bin, freeAddr()),
			Rate:  loadRate(), Windows: windows, Window: window, Warmup: time.Second, Seed: uint64(i + 1)},
			"", "", fmt.Sprintf("power run %2d", i+1))
		if r == nil {
			ratios = append(ratios, "failed")
			continue
		}
		v := verdict(r, "cpu")
		if v == compare.Worse {
			caught++
		}
		for _, m := range r.Metrics {
			if m.Metric.Name == "cpu" {
				ratios = append(ratios, fmt.Sprintf("%+.1f%%", 100*(m.Comparisons[0].Ratio.Est-1)))
			}
		}
		fmt.Printf("power run %2d: cpu %s (%s), cpu/1k %s, changed %v, %.0fs\n", i+1, v, ratios[len(ratios)-1], verdict(r, "cpu_per_1k"), changed(r), r.Seconds)
	}
	fmt.Printf("power: 3%% more CPU called worse in %d of %d runs (goal >= 90%%); B/A estimates %s; %s\n",
		caught, runs, strings.Join(ratios, " "), time.Since(start).Round(time.Second))
}

func sweep(ctx context.Context, bin string) {
	cmd := bin + " -tick 2ms -fanout 16 -spin 5us"
	var sides []compare.Side
	for _, v := range []string{"1", "2", "8"} {
		sides = append(sides, compare.Side{Name: "GOMAXPROCS=" + v, Command: cmd, Env: []string{"GOMAXPROCS=" + v}})
	}
	r, err := compare.Run(ctx, compare.Config{Sides: sides, Sweep: "GOMAXPROCS", Windows: 6, Window: time.Second, Seed: 1})
	if err != nil {
		fatal(err)
	}
	for _, m := range r.Metrics {
		if m.Metric.Name != "cpu" && m.Metric.Name != "syscall.futex" && m.Metric.Name != "threads" && m.Metric.Name != "wakeups" {
			continue
		}
		var parts []string
		for i, s := range m.Sides {
			parts = append(parts, fmt.Sprintf("%s %.3g", sides[i].Name, s.Median))
		}
		var vs []string
		for _, c := range m.Comparisons {
			vs = append(vs, c.Verdict)
		}
		fmt.Printf("sweep %s: %s (vs GOMAXPROCS=1: %s)\n", m.Metric.Name, strings.Join(parts, ", "), strings.Join(vs, ", "))
	}
	fmt.Printf("sweep: %s; %.0fs\n", r.Best, r.Seconds)
}

// defaultRuns runs the default protocol on the 3% pair n times: the
// first report whole, then one line a run and the power over the runs.
// itersPerMs is how many iterations of the patient's work loop take a
// millisecond here (measured once, by the patient itself, at the start).
var itersPerMs int

// requestMS is the work per request of the 3% pair, in milliseconds of
// the work loop; the pair is loaded at loadRate().
var requestMS = 1.0

// loadRate is the 3% pair's fixed load: 200 requests a second of 1 ms,
// fewer of more work, so the server's CPU stays near a quarter of a core.
func loadRate() float64 { return math.Round(200 / requestMS) }

// powerPair is the 3% pair under load at addr: A works ~1 ms a request,
// B 3% more in all. The work is a fixed number of loop iterations, not a
// wall-time spin (which a preempted request spins less of). A request
// costs ~1.2 ms of CPU in all (1,200 ms per 1k requests in the default
// runs), ~0.2 ms of it in net/http, so 3% more work per request is 3.6%
// more loop: B runs 1.036x A's iterations. (Ten default runs estimated
// +3.1% to +5.5%, median +3.8%: the loop is more of a request's cost than
// reckoned, so the pair differs by nearer 3.6-3.8% than 3%.) With
// -request-ms W the same reckoning gives B 1 + 0.03*(W+0.2)/W times A's
// loop.
func powerPair(bin, addr string) []compare.Side {
	u := "http://" + addr + "/"
	a := int(math.Round(float64(itersPerMs) * requestMS))
	b := int(math.Round(float64(a) * (1 + 0.03*(requestMS+0.2)/requestMS)))
	return []compare.Side{{Name: "A", Command: fmt.Sprintf("%s -listen %s -iters %d", bin, addr, a), URL: u},
		{Name: "B", Command: fmt.Sprintf("%s -listen %s -iters %d", bin, addr, b), URL: u}}
}

func defaultRuns(ctx context.Context, bin string, n int, jsonDir string) {
	caught, within := 0, 0
	var secs []string
	start := time.Now()
	for i := range n {
		r := runKept(ctx, compare.Config{Sides: powerPair(bin, freeAddr()), Rate: loadRate()},
			jsonDir, fmt.Sprintf("default-%02d.json", i+1), fmt.Sprintf("default run %2d", i+1))
		if r == nil {
			continue
		}
		if i == 0 {
			r.WriteText(os.Stdout)
		}
		v := verdict(r, "cpu")
		if v == compare.Worse {
			caught++
		}
		if r.Seconds <= 300 {
			within++
		}
		est, p := math.NaN(), math.NaN()
		for _, m := range r.Metrics {
			if m.Metric.Name == "cpu" {
				est, p = m.Comparisons[0].Ratio.Est, m.Comparisons[0].PAdj
			}
		}
		secs = append(secs, fmt.Sprintf("%.0f", r.Seconds))
		fmt.Printf("default run %2d: cpu %s (%+.1f%%, p=%.3f), changed %v, %.0fs (%d starts, warm-up %.0fs, dropped %.0fs)%s\n",
			i+1, v, 100*(est-1), p, changed(r), r.Seconds, r.Time.Starts, r.Time.Warmup, r.Time.Dropped, loadNote(r))
	}
	fmt.Printf("default: 3%% more CPU called worse in %d of %d runs (goal >= 90%%); %d of %d runs within 300 s (seconds: %s); %s\n",
		caught, n, within, n, strings.Join(secs, " "), time.Since(start).Round(time.Second))
}

// aaLoad runs the 3% pair's A side against itself under its load at
// compare's defaults, n times from run first: any better or worse verdict
// is a false alarm.
func aaLoad(ctx context.Context, bin string, first, n int, jsonDir string) {
	alarms := 0
	start := time.Now()
	for i := first - 1; i < first-1+n; i++ {
		sides := powerPair(bin, freeAddr())
		sides[1].Command = sides[0].Command
		r := runKept(ctx, compare.Config{Sides: sides, Rate: loadRate(), Seed: uint64(1000 + i)},
			jsonDir, fmt.Sprintf("aaload-%02d.json", i+1), fmt.Sprintf("aaload run %2d", i+1))
		if r == nil {
			continue
		}
		c := changed(r)
		if len(c) > 0 {
			alarms++
		}
		fmt.Printf("aaload run %2d: %d metrics, changed %v, %.0fs%s\n", i+1, len(r.Metrics), c, r.Seconds, loadNote(r))
	}
	fmt.Printf("aaload: %d of %d runs with a better/worse verdict (goal <= 5%%); %s\n", alarms, n, time.Since(start).Round(time.Second))
}

// loadNote describes how CPU was tested against the load generator's CPU
// in r: whether the pairs were adjusted, the slope and correlation, the
// generator's B/A, and the raw pairs' p beside the test's ("" without).
func loadNote(r *compare.Result) string {
	for _, m := range r.Metrics {
		if m.Metric.Name != "cpu" || len(m.Comparisons) == 0 || m.Comparisons[0].Load == nil {
			continue
		}
		l := m.Comparisons[0].Load
		return fmt.Sprintf("; load adjusted %v (slope %.2f, corr %.2f, generator B/A %.3f p=%.3f), raw p %.4f, test p %.4f%s",
			l.Used, l.Slope, l.Corr, l.Load, l.LoadP, l.Unadjusted, l.P, map[bool]string{true: "", false: ": " + l.Why}[l.Used])
	}
	return ""
}

// reanalyzeDir reads default-NN.json results and, for CPU, sets the
// unpaired test compare uses (min of Mann-Whitney U and KS) beside a paired
// one that matches the randomized ABBA design: each block's A and B windows
// paired in order, Wilcoxon's signed-rank test on the log ratios (exact,
// by enumerating the signs). Both are read at 0.01, CPU's share of alpha
// as the first of four primary metrics in the weighted Holm correction.
func reanalyzeDir(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "default-*.json"))
	aaFiles, _ := filepath.Glob(filepath.Join(dir, "aa*-*.json"))
	sort.Strings(files)
	sort.Strings(aaFiles)
	alarms, was := 0, 0
	for _, f := range aaFiles {
		r := readResult(f)
		before := changed(r)
		reanalyze(r)
		now := changed(r)
		if len(before) > 0 {
			was++
		}
		if len(now) > 0 {
			alarms++
		}
		fmt.Printf("%s: changed %v, now %v%s\n", filepath.Base(f), before, now, loadNote(r))
	}
	if len(aaFiles) > 0 {
		fmt.Printf("reanalysis of the same program against itself: a better/worse verdict in %d of %d runs, now %d of %d\n",
			was, len(aaFiles), alarms, len(aaFiles))
	}
	unpaired, paired, analysed := 0, 0, 0
	for _, f := range files {
		r := *readResult(f)
		var seq []compare.Window
		for _, w := range r.Windows {
			if _, ok := w.Values["cpu"]; ok && !w.Dropped {
				seq = append(seq, w)
			}
		}
		var a, bs, d []float64
		for i := 0; i+4 <= len(seq); i += 4 {
			var ba, bb []float64
			for _, w := range seq[i : i+4] {
				if w.Side == 0 {
					ba = append(ba, w.Values["cpu"])
				} else {
					bb = append(bb, w.Values["cpu"])
				}
			}
			for k := range min(len(ba), len(bb)) {
				d = append(d, math.Log(bb[k]/ba[k]))
			}
		}
		for _, w := range seq {
			if w.Side == 0 {
				a = append(a, w.Values["cpu"])
			} else {
				bs = append(bs, w.Values["cpu"])
			}
		}
		pu := min(compare.MannWhitney(a, bs).P, compare.KolmogorovSmirnov(a, bs).P)
		pp := compare.SignedRank(d).P
		if pu <= 0.01 {
			unpaired++
		}
		if pp <= 0.01 {
			paired++
		}
		before := verdict(&r, "cpu")
		was := changed(&r)
		reanalyze(&r)
		now := verdict(&r, "cpu")
		if now == compare.Worse {
			analysed++
		}
		fmt.Printf("%s: %d pairs, mean log ratio %+.2f%%: unpaired p=%.4f, paired p=%.4f; cpu %s, now %s (changed %v, now %v)%s\n",
			filepath.Base(f), len(d), 100*mean(d), pu, pp, before, now, was, changed(&r), loadNote(&r))
	}
	fmt.Printf("reanalysis: CPU at p <= 0.01 in %d of %d runs unpaired, %d of %d paired within blocks; compare's analysis now calls it worse in %d of %d\n",
		unpaired, len(files), paired, len(files), analysed, len(files))
}

func readResult(f string) *compare.Result {
	b, err := os.ReadFile(f)
	if err != nil {
		fatal(err)
	}
	var r compare.Result
	if err := json.Unmarshal(b, &r); err != nil {
		fatal(fmt.Errorf("%s: %w", f, err))
	}
	return &r
}

// reanalyze runs compare's analysis as it stands, with this version's
// metric definitions, on a saved result. Results written before windows
// carried their round get them from the order (each slot keeps one window
// of a kind, a round is one slot a side).
func reanalyze(r *compare.Result) {
	kept := map[string]int{}
	for i := range r.Windows {
		w := &r.Windows[i]
		if w.Dropped {
			continue
		}
		if w.Round == 0 {
			w.Round = kept[w.Kind]/len(r.Sides) + 1
		}
		kept[w.Kind]++
	}
	r.Metrics = compare.Analyze(r.Sides, r.Windows, compare.MetricsOf(r.Windows, len(r.Sides)), compare.Options{Alpha: r.Protocol.Alpha,
		Primary: r.Protocol.Primary, PrimaryShare: r.Protocol.PrimaryShare, Looks: r.Protocol.Looks})
}

// runKept runs one comparison of a campaign and keeps its result, failed
// runs too, as name in jsonDir. An interrupted run ends the campaign; a run
// that failed otherwise (the machine could not hold the load) is printed as
// label's failure and counts as missed: nil.
func runKept(ctx context.Context, cfg compare.Config, jsonDir, name, label string) *compare.Result {
	r, err := compare.Run(ctx, cfg)
	if r != nil {
		keepJSON(r, jsonDir, name)
	}
	if err != nil {
		if ctx.Err() != nil {
			fatal(err)
		}
		fmt.Printf("%s: failed: %v\n", label, err)
		return nil
	}
	return r
}

// keepJSON writes r as name in dir for re-analysis; no dir, nothing.
func keepJSON(r *compare.Result, dir, name string) {
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		fatal(err)
	}
	defer f.Close()
	if err := r.WriteJSON(f); err != nil {
		fatal(fmt.Errorf("write %s: %w", name, err))
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// noise splits the CPU variation of the 3% pair's A side under its load
// into two parts, from runs of A against itself with one kept process a
// side: within a process, the spread of the log ratio of its consecutive
// windows (sqrt(2) times a window's own noise, sw); between processes,
// the spread of the processes' mean log CPU, less what the windows' own
// noise gives a mean of k windows (sw^2/k), leaves sp, a process's own
// level. A default run starts a fresh process for every window, so each
// of its pairs differs by about sqrt(2*(sp^2 + sw^2)): that, against the
// effect, is what sets the power of its 10 pairs.
func noise(ctx context.Context, bin string, runs int, window time.Duration, windows int) {
	a := int(math.Round(float64(itersPerMs) * requestMS))
	var within, means []float64
	// Within each process, each window's log CPU and log probe cost less
	// the process's means, and the consecutive differences of both.
	var devC, devP, diffC, diffP []float64
	probe := startPing()
	defer probe.close()
	start := time.Now()
	for i := range runs {
		sides := make([]compare.Side, 2)
		for j, name := range []string{"A", "A'"} {
			addr := freeAddr()
			sides[j] = compare.Side{Name: name, Command: fmt.Sprintf("%s -listen %s -iters %d", bin, addr, a), URL: "http://" + addr + "/"}
		}
		r, err := compare.Run(ctx, compare.Config{Sides: sides, Rate: loadRate(), Keep: true,
			Windows: windows, Window: window, Seed: uint64(i + 1)})
		if err != nil {
			fmt.Printf("noise run %d: failed: %v\n", i+1, err)
			continue
		}
		for side := range sides {
			var logs, pings []float64
			for _, w := range r.Windows {
				if w.Side == side && w.Kind == "cpu" && !w.Dropped && w.Values["cpu"] > 0 {
					logs = append(logs, math.Log(w.Values["cpu"]))
					end := w.Start.Add(time.Duration(w.Seconds * float64(time.Second)))
					if ns := probe.mean(w.Start, end); ns > 0 {
						pings = append(pings, math.Log(ns))
					}
				}
			}
			if len(logs) < 2 {
				continue
			}
			// The probe counts only where it covered every window.
			withProbe := len(pings) == len(logs)
			mc, mp := mean(logs), 0.0
			if withProbe {
				mp = mean(pings)
			}
			for k := range logs {
				if k > 0 {
					within = append(within, logs[k]-logs[k-1])
				}
				if !withProbe {
					continue
				}
				if k > 0 {
					diffP = append(diffP, pings[k]-pings[k-1])
					diffC = append(diffC, logs[k]-logs[k-1])
				}
				devC = append(devC, logs[k]-mc)
				devP = append(devP, pings[k]-mp)
			}
			means = append(means, mc)
			fmt.Printf("noise run %d, process %s: CPU %s %% of a core\n", i+1, sides[side].Name, expList(logs))
		}
	}
	if len(means) < 3 || len(within) < 3 {
		fatal(fmt.Errorf("noise: too few processes measured (%d)", len(means)))
	}
	k := float64(len(within)+len(means)) / float64(len(means)) // windows a process
	sw := sd(within) / math.Sqrt2
	sp := math.Sqrt(max(sd(means)*sd(means)-sw*sw/k, 0))
	fmt.Printf("noise (requests of %g ms of work at %g a second): %d processes, %.1f windows each: a window's own noise %.2f%%, a process's own level %.2f%% (processes' means spread %.2f%%); "+
		"a default run's pairs (a fresh process a window) would spread %.2f%%, kept processes' %.2f%%; %s\n",
		requestMS, loadRate(), len(means), k, 100*sw, 100*sp, 100*sd(means), 100*math.Sqrt(2*(sp*sp+sw*sw)), 100*math.Sqrt2*sw, time.Since(start).Round(time.Second))
	if len(devP) < 3 {
		return
	}
	// How much of a window's own noise the wake-up probe accounts for:
	// the correlation within processes, and the consecutive windows'
	// spread once the probe's least-squares share is taken out.
	var cp, pp, cc float64
	for k := range devC {
		cp += devC[k] * devP[k]
		pp += devP[k] * devP[k]
		cc += devC[k] * devC[k]
	}
	beta := cp / pp
	res := make([]float64, len(diffC))
	for k := range diffC {
		res[k] = diffC[k] - beta*diffP[k]
	}
	fmt.Printf("noise and the wake-up probe: correlation %.2f within processes (CPU moves %.2f%% for 1%% of probe cost; the probe's batches spread %.1f%% from window to window); "+
		"a window's own noise %.2f%%, %.2f%% with the probe's share taken out\n",
		cp/math.Sqrt(pp*cc), beta, 100*sd(diffP)/math.Sqrt2, 100*sw, 100*sd(res)/math.Sqrt2)
}

// sd is the sample standard deviation of x.
func sd(x []float64) float64 {
	m, v := mean(x), 0.0
	for _, e := range x {
		v += (e - m) * (e - m)
	}
	return math.Sqrt(v / float64(len(x)-1))
}

// expList prints logarithms back as values.
func expList(logs []float64) string {
	var s []string
	for _, l := range logs {
		s = append(s, fmt.Sprintf("%.2f", math.Exp(l)))
	}
	return strings.Join(s, " ")
}
