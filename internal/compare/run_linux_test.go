package compare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// quick is a protocol short enough for tests: 400 ms windows.
func quick(sides ...Side) Config {
	return Config{Sides: sides, Windows: 8, Window: 400 * time.Millisecond, Warmup: 300 * time.Millisecond,
		Syscalls: "off", Seed: 7}
}

// describe lists a metric's windows and comparisons, for a failure message.
func describe(r *Result, metric string) string {
	var b strings.Builder
	for _, m := range r.Metrics {
		if m.Metric.Name != metric {
			continue
		}
		for _, c := range m.Comparisons {
			fmt.Fprintf(&b, "%s vs %s: n=%d+%d pairs=%d p=%.4g p_holm=%.4g ratio=%.3g [%.3g, %.3g] %s %s\n",
				r.Sides[c.Side].Name, r.Sides[c.Base].Name, c.N, c.M, c.Pairs, c.P, c.PAdj,
				c.Ratio.Est, c.Ratio.Lo, c.Ratio.Hi, c.Verdict, c.Why)
		}
	}
	for _, w := range r.Windows {
		fmt.Fprintf(&b, "window %s %s dropped=%v values=%v\n", r.Sides[w.Side].Name, w.Kind, w.Dropped, w.Values[metric])
	}
	return b.String()
}

func verdicts(r *Result) map[string]string {
	out := map[string]string{}
	for _, m := range r.Metrics {
		for _, c := range m.Comparisons {
			out[fmt.Sprintf("%s/%s", m.Metric.Name, r.Sides[c.Side].Name)] = c.Verdict
		}
	}
	return out
}

// TestSelfVsSelf runs the same program on both sides, with a fresh
// process for each run of windows (the default) and with one process a
// side kept throughout.
func TestSelfVsSelf(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/patient")
	cmd := bin + " -tick 2ms -spin 50us"
	for _, tc := range []struct {
		name      string
		keep      bool
		isolation string
	}{
		{"restarted", false, "a fresh process for each window"},
		{"kept", true, "paused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quick(Side{Name: "A", Command: cmd}, Side{Name: "B", Command: cmd})
			cfg.Keep = tc.keep
			// 0.1% rather than 5%: a test that fails one run in twenty
			// (or in a hundred) by design is a flaky test. At 1% a
			// clean-clone CI run called the restarted B's CPU worse:
			// fresh processes of a 2 ms ticker each lock to the kernel's
			// tick at a phase of their own (4.96-7.23% of a core here),
			// and all eight of B's windows fell above six of A's (U=4,
			// p=0.0019, 0.0047 after Holm). The AA campaigns of
			// bench/compare-stats measure the false-alarm rate at the
			// default level.
			cfg.Stats.Alpha = 0.001
			r, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Metrics) < 4 {
				t.Fatalf("only %d metrics compared", len(r.Metrics))
			}
			for k, v := range verdicts(r) {
				if v == Better || v == Worse {
					t.Errorf("the same program against itself: %s is %s\n%s", k, v, describe(r, strings.Split(k, "/")[0]))
				}
			}
			if !strings.Contains(r.Protocol.Isolation, tc.isolation) {
				t.Errorf("isolation %q: want %q", r.Protocol.Isolation, tc.isolation)
			}
			// One process per window, or one a side.
			wantLives := strings.Count(r.Protocol.Order, "A")
			if tc.keep {
				wantLives = 1
			}
			if r.Protocol.Restart == tc.keep || r.Sides[0].Lives != wantLives {
				t.Errorf("order %s: restart %v, A's processes %d, want %d", r.Protocol.Order, r.Protocol.Restart, r.Sides[0].Lives, wantLives)
			}
		})
	}
}

func TestMoreWorkIsWorse(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/patient")
	cfg := quick(Side{Name: "A", Command: bin + " -tick 5ms -spin 200us"}, Side{Name: "B", Command: bin + " -tick 5ms -spin 1ms"})
	if testenv.Has(testenv.Root) && testenv.Has(testenv.Tracefs) {
		cfg.Syscalls = "on"
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := verdicts(r)
	if v["cpu/B"] != Worse {
		t.Errorf("B spins 5x longer per tick: CPU verdict %q, want worse", v["cpu/B"])
	}
	found := false
	for _, s := range r.Sentences {
		found = found || strings.HasPrefix(s, "B uses") && strings.Contains(s, "more CPU than A (worse")
	}
	if !found {
		t.Errorf("no sentence says B uses more CPU: %q", r.Sentences)
	}
	if cfg.Syscalls == "on" && r.Protocol.SyscallSeconds == 0 {
		t.Errorf("syscalls were not counted: %s", r.Protocol.Syscalls)
	}
	// Where BPF works, syscall windows count with one program per process
	// (one grace period to release, not one per syscall counted).
	if cfg.Syscalls == "on" && testenv.Has(testenv.BPF) && !strings.Contains(r.Protocol.Syscalls, "BPF") {
		t.Errorf("syscalls counted by %q, want the BPF counter", r.Protocol.Syscalls)
	}
	// Where the time went: 16 CPU windows of 0.4 s at least, a process
	// started and warmed up for each, all within the run.
	tm := r.Time
	starts := len(r.Protocol.Order)
	parts := tm.CPUWindows + tm.SyscallWindows + tm.Starting + tm.Warmup
	if tm.CPUWindows < 16*0.4 || tm.Starts != starts || tm.Warmup < float64(starts)*0.3 || parts > r.Seconds ||
		(cfg.Syscalls == "on" && tm.SyscallWindows < 16*0.04) {
		t.Errorf("time spent %+v of %.2fs: want >= 6.4s of CPU windows, %d starts (order %s) each warmed up 0.3s, parts within the whole", tm, r.Seconds, starts, r.Protocol.Order)
	}
}

// TestSweepGOMAXPROCS is the seeds' case 5: a light periodic fan-out runs
// with more CPU, threads, wake-ups and futex calls the more Ps it has,
// and the sweep names GOMAXPROCS=1 best. The fan-out is light enough that
// the extra Ps' scheduling dominates its cost: with -fanout 16 -spin 5us
// the work itself hid it, GOMAXPROCS=8 costing only about 8% more on
// 2 CPUs under the race detector, and six 400 ms windows a side left the
// CPU verdict unknown in 2 of 8 runs; at -tick 1ms -fanout 8 -spin 1us
// it costs 1.5x (8 of 8 runs decided, beside another job's benchmark).
func TestSweepGOMAXPROCS(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	testenv.Timing(t)
	bin := testbin.Build(t, "./testdata/patient")
	cmd := bin + " -tick 1ms -fanout 8 -spin 1us"
	var sides []Side
	for _, v := range []string{"1", "8"} {
		sides = append(sides, Side{Name: "GOMAXPROCS=" + v, Command: cmd, Env: []string{"GOMAXPROCS=" + v}})
	}
	cfg := quick(sides...)
	// 10 windows a side, so the rounds pair up: a clean-clone CI run
	// under the race detector had 6 a side overlap (GOMAXPROCS=1 2.8-4.3%,
	// 8 4.0-7.0% of a core) and the unpaired tests left CPU undecided;
	// with 10 pairs the signed-rank test takes out what moved between
	// rounds.
	cfg.Windows, cfg.Sweep = 10, "GOMAXPROCS"
	// One process a value, kept: with a fresh process per 400 ms window the
	// start-up weighed on each window (CPU spread 3.3-6.6% on both sides in
	// a CI run, and 1 of 3 runs undecided with a second of warm-up).
	cfg.Keep = true
	root := testenv.Has(testenv.Root) && testenv.Has(testenv.Tracefs)
	if root {
		cfg.Syscalls = "on"
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	v := verdicts(r)
	if v["cpu/GOMAXPROCS=8"] != Worse {
		t.Errorf("GOMAXPROCS=8 CPU verdict %q, want worse\n%s", v["cpu/GOMAXPROCS=8"], describe(r, "cpu"))
	}
	if !strings.Contains(r.Best, "GOMAXPROCS=1") {
		t.Errorf("best %q, want GOMAXPROCS=1", r.Best)
	}
	if root && v["syscall.futex/GOMAXPROCS=8"] != Worse {
		t.Errorf("GOMAXPROCS=8 futex verdict %q, want worse (%v)\n%s", v["syscall.futex/GOMAXPROCS=8"], v, describe(r, "syscall.futex"))
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestLoadLatency runs a server under a fixed load whose B side sleeps
// 50 ms per request: P50 and P99 are worse, and one URL for both means one
// side at a time. It is a timing test: the generator in this process must
// hold its rate and its schedule.
func TestLoadLatency(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	testenv.Timing(t)
	bin := testbin.Build(t, "./testdata/patient")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	u := "http://" + addr + "/"
	const delay = 50 * time.Millisecond
	cfg := quick(Side{Name: "A", Command: bin + " -listen " + addr, URL: u},
		Side{Name: "B", Command: bin + " -listen " + addr + " -delay " + delay.String(), URL: u})
	cfg.Rate, cfg.Windows, cfg.Window = 200, 10, 500*time.Millisecond
	// B holds delay x rate = 10 requests in flight: enough connections
	// that it is never saturated.
	cfg.Connections = 32
	// Latency is measured from each request's intended send time, so a
	// late generator adds its lag to every side's latencies. A window is
	// kept when the lag's p99 is under half B's added delay: then A's p99
	// cannot reach B's through the generator alone, and B's delay still
	// shows in the tail. The delay is long beside the 10-25 ms by which a
	// 2-CPU machine busy with other work delays the generator's timers
	// (its lag p99 in 10 runs here).
	cfg.MaxLag = delay / 2
	// compare refuses a run whose generator cannot keep its schedule (five
	// windows in a row dropped): on a machine whose other work delays this
	// process's timers for longer than that, the verdicts say nothing about
	// the code. Such a run is retried, and when every attempt was refused
	// for the generator's lateness alone the test is skipped with the
	// reasons, as load's own timing tests are; any other failure fails.
	var r *Result
	var late []string
	for range 3 {
		var err error
		r, err = Run(context.Background(), cfg)
		if err == nil {
			break
		}
		if !generatorLate(r) {
			t.Fatal(err)
		}
		late = append(late, err.Error())
		t.Logf("attempt refused, the generator was late: %v", err)
		r = nil
	}
	if r == nil {
		t.Skipf("the generator was late in every attempt (a machine busy with other work): %s", strings.Join(late, "; "))
	}
	v := verdicts(r)
	if v["p99/B"] != Worse || v["p50/B"] != Worse {
		t.Errorf("B sleeps 50 ms a request: p50 %q, p99 %q, want worse", v["p50/B"], v["p99/B"])
	}
	if !r.Protocol.Restart || r.Sides[0].Lives < 2 {
		t.Errorf("one URL for both: want one side at a time, restarted (restart %v, A's processes %d)", r.Protocol.Restart, r.Sides[0].Lives)
	}
	for _, w := range r.Windows {
		if w.Kind == kindCPU && !w.Dropped && w.Values["cpu_per_1k"] <= 0 {
			t.Errorf("window %d has no CPU per 1k requests: %v", w.Index, w.Values)
		}
		// The generator's own CPU, the covariate of the sides' CPU under
		// load: it sent 100-200 requests a second, which costs some CPU
		// and far less than all of the machine's.
		if g := w.Values[loadCPUKey]; w.Kind == kindCPU && !w.Dropped && (g <= 0 || g >= 100*float64(runtime.NumCPU())) {
			t.Errorf("window %d: the load generator's CPU %v%% of a core", w.Index, g)
		}
	}
	for _, m := range r.Metrics {
		if c := m.Comparisons[0]; adjustable(m.Metric) && c.Paired && c.Load == nil {
			t.Errorf("%s is paired but not tested against the generator's CPU: %+v", m.Metric.Name, c)
		}
	}
}

// generatorLate reports whether every window r dropped was dropped for
// the load generator's timing: its lag, or a rate it did not hold (fell
// short of, or all connections busy while the machine starved the
// server), the machine's doing rather than the code's. Errors and
// connection failures are not.
func generatorLate(r *Result) bool {
	if r == nil {
		return false
	}
	dropped := 0
	for _, w := range r.Windows {
		if !w.Dropped {
			continue
		}
		dropped++
		late := strings.Contains(w.Why, "the generator was late") || strings.Contains(w.Why, "the generator fell behind") ||
			strings.Contains(w.Why, "of the target rate")
		if !late || strings.Contains(w.Why, "connections failed") || strings.Contains(w.Why, "errors in") {
			return false
		}
	}
	return dropped > 0
}

// onceOnly is a command that runs the first time and fails at once every
// time after.
func onceOnly(t *testing.T) string {
	mark := filepath.Join(t.TempDir(), "started")
	return fmt.Sprintf("[ -e %[1]s ] && exit 1; touch %[1]s; exec sleep 100", mark)
}

func TestBadInput(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/patient")
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
		// windows is whether some windows were taken before the failure.
		windows bool
	}{
		{"command fails", quick(Side{Name: "A", Command: "exit 3"}, Side{Name: "B", Command: bin}), ErrTarget, false},
		{"kept command exits mid-run", func() Config {
			c := quick(Side{Name: "A", Command: bin + " -tick 10ms"}, Side{Name: "B", Command: "sleep 1.5"})
			c.Keep = true
			return c
		}(), ErrTarget, true},
		{"command fails when restarted", quick(Side{Name: "A", Command: bin + " -tick 10ms"}, Side{Name: "B", Command: onceOnly(t)}), ErrTarget, true},
		{"dead pid", quick(Side{Name: "A", PID: 1 << 29}, Side{Name: "B", PID: os.Getpid()}), nil, false},
		{"URL refuses", func() Config {
			c := quick(Side{Name: "A", Command: "sleep 5", URL: fmt.Sprintf("http://127.0.0.1:%d/", freePort(t))},
				Side{Name: "B", Command: "sleep 5", URL: "http://127.0.0.1:1/"})
			c.Rate, c.ReadyTimeout = 100, 500*time.Millisecond
			return c
		}(), ErrTarget, false},
		{"one window", func() Config {
			c := quick(Side{Name: "A", Command: bin}, Side{Name: "B", Command: bin})
			c.Windows = 1
			return c
		}(), ErrBadInput, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r, err := Run(context.Background(), tc.cfg)
			if err == nil {
				t.Fatalf("no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if tc.windows && (r == nil || len(r.Windows) == 0 || r.Error == "") {
				t.Errorf("windows taken before the failure are not kept: %+v", r)
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("took %s to fail", time.Since(start))
			}
		})
	}
}
