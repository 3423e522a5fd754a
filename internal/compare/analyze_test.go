package compare

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
)

// TestPlannedLooks: the looks a sequential run plans are the most it can
// make. The run's loop is played with every round as short as it can be
// (a CPU window a side, no syscall window), which makes the most rounds.
func TestPlannedLooks(t *testing.T) {
	for _, tc := range []struct {
		name                string
		sides, maxPerSide   int
		window, sys, budget time.Duration
		want                int
	}{
		{"defaults: the cap a side decides", 2, 10, 10 * time.Second, time.Second, 5 * time.Minute, 8},
		{"a short budget", 2, 10, 10 * time.Second, time.Second, time.Minute, 1},
		{"3 a side at most", 2, 3, time.Second, 0, time.Hour, 1},
		{"the budget decides", 2, 100, time.Second, 100 * time.Millisecond, time.Minute, 27},
		{"four sides", 4, 20, time.Second, 100 * time.Millisecond, time.Minute, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := plannedLooks(tc.sides, tc.maxPerSide, tc.window, tc.sys, tc.budget)
			if got != tc.want {
				t.Errorf("plannedLooks = %d, want %d", got, tc.want)
			}
			n := time.Duration(tc.sides)
			rounds, spent, looks := 3, 3*n*tc.window, 1
			for rounds < tc.maxPerSide && spent+n*(tc.window+tc.sys) <= tc.budget {
				rounds++
				spent += n * tc.window
				looks++
			}
			if looks != got {
				t.Errorf("the fastest run makes %d looks, plannedLooks says %d", looks, got)
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	for _, tc := range []struct {
		sides, perSide int
	}{{2, 10}, {2, 3}, {3, 6}, {4, 5}} {
		rng := rand.New(rand.NewPCG(1, 2))
		order := schedule(tc.sides, tc.perSide, rng)
		counts := make([]int, tc.sides)
		for _, s := range order {
			counts[s]++
		}
		for s, n := range counts {
			if n != tc.perSide {
				t.Errorf("%d sides x %d: side %d has %d windows (order %v)", tc.sides, tc.perSide, s, n, order)
			}
		}
		// Each full block is a permutation followed by its reverse.
		block := 2 * tc.sides
		for k := 0; k+block <= len(order) && k/block < tc.perSide/2; k += block {
			for i := range tc.sides {
				if order[k+i] != order[k+block-1-i] {
					t.Errorf("%d sides: block at %d is not mirrored: %v", tc.sides, k, order[k:k+block])
				}
			}
		}
	}
}

// windowsOf builds CPU windows of metric name with the values given per
// side, all of one process a side unless lives is set.
func windowsOf(name string, lives bool, vals ...[]float64) []Window {
	var out []Window
	for s, vs := range vals {
		for i, v := range vs {
			life := 1
			if lives {
				life = i + 1
			}
			out = append(out, Window{Index: len(out), Side: s, Kind: kindCPU, Life: life, Values: map[string]float64{name: v}})
		}
	}
	return out
}

func TestAnalyzeVerdicts(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	base := []float64{10.0, 10.1, 9.9, 10.05, 9.95, 10.2, 9.8, 10.0, 10.1, 9.9}
	scaled := func(f float64) []float64 {
		out := make([]float64, len(base))
		for i, v := range base {
			out[i] = v * f
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		metric  Metric
		lives   bool
		a, b    []float64
		verdict string
	}{
		{"clearly more CPU", metricCPU, false, base, scaled(1.3), Worse},
		{"clearly fewer wake-ups", metricWakeups, false, base, scaled(0.5), Better},
		{"identical", metricCPU, false, base, base, Same},
		{"shifted within the band", metricCPU, false, base, scaled(1.002), Same},
		{"noisy", metricCPU, false, []float64{5, 15, 8, 12, 20, 3, 9, 11, 14, 6}, []float64{7, 16, 5, 13, 18, 4, 10, 12, 15, 8}, Unknown},
		{"gauge of one process a side", metricThreads, false, []float64{5, 5, 5, 5, 5, 5}, []float64{6, 6, 6, 6, 6, 6}, NotTested},
		// An AA run's kept processes: one locked to the tick in system
		// code, the other in user code, window after window.
		{"user/system split of one process a side", metricUser, false, []float64{0.81, 1.08, 1.22, 1.32, 0.89, 2.30, 0.98, 1.60}, []float64{4.26, 4.28, 4.63, 4.28, 4.33, 4.22, 4.30, 4.25}, NotTested},
		{"user/system split over processes", metricSys, true, []float64{4.2, 3.8, 4.0, 4.1, 3.9, 4.0, 4.2, 3.9}, []float64{0.8, 0.8, 0.7, 0.8, 0.9, 0.8, 0.8, 0.7}, Better},
		{"gauge over processes", metricThreads, true, []float64{5, 5, 5, 5, 5, 5, 5, 5}, []float64{9, 9, 9, 9, 9, 9, 9, 9}, Worse},
		{"too few windows", metricCPU, false, []float64{1}, []float64{2}, Unknown},
		// 3 a side: rank tests cannot go below p=0.1, Welch on logs decides.
		{"tiny but clear", metricWakeups, false, []float64{2000, 1990, 2010}, []float64{200, 198, 203}, Better},
		// A syscall A never makes (GOMAXPROCS=1's futex): no ratio, the
		// difference decides.
		{"from none to many", syscallMetricCPU("futex"), false, []float64{0, 0, 0, 0, 0, 0}, []float64{810, 790, 845, 770, 802, 820}, Worse},
		{"from none to a few, now and then", syscallMetricCPU("futex"), false, []float64{0, 0, 0, 1, 0, 0}, []float64{0, 2, 0, 0, 1, 0}, Unknown},
		{"from many to none", syscallMetricCPU("futex"), false, []float64{810, 790, 845, 770, 802, 820}, []float64{0, 0, 0, 0, 0, 0}, Better},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := windowsOf(tc.metric.Name, tc.lives, tc.a, tc.b)
			res := Analyze(two, ws, []Metric{tc.metric}, Options{})
			c := res[0].Comparisons[0]
			if c.Verdict != tc.verdict {
				t.Fatalf("verdict %q, want %q (%+v)", c.Verdict, tc.verdict, c)
			}
			if c.Shift != nil && !strings.Contains(c.Why, "median is 0") {
				t.Errorf("judged on the difference without saying why: %+v", c)
			}
			if tc.verdict == Unknown && len(tc.a) > 2 && c.Shift == nil && c.More == 0 && !strings.Contains(c.Why, "edge") {
				t.Errorf("unknown without an estimate of the windows needed: %+v", c)
			}
			if tc.name == "tiny but clear" && c.Welch == nil {
				t.Errorf("3+3 windows decided without Welch: %+v", c)
			}
		})
	}
}

// syscallMetricCPU is a syscall metric measured in CPU windows, so that
// windowsOf can build its windows.
func syscallMetricCPU(name string) Metric {
	m := syscallMetric(name)
	m.Kind = kindCPU
	return m
}

// TestSentenceFromZero: a change from a median of 0 is worded with B's
// median, never as a percentage of nothing.
func TestSentenceFromZero(t *testing.T) {
	sides := []Side{{Name: "GOMAXPROCS=1"}, {Name: "GOMAXPROCS=8"}}
	ws := windowsOf("syscall.futex", false, []float64{0, 0, 0, 0, 0, 0}, []float64{810, 790, 845, 770, 802, 820})
	res := Analyze(sides, ws, []Metric{syscallMetricCPU("futex")}, Options{})
	got := Sentences(sides, res)
	want := "futex: GOMAXPROCS=8 has a median of 806.0 /s where GOMAXPROCS=1's is 0 (worse, p=0.002, n=6+6)."
	if len(got) == 0 || got[0] != want {
		t.Errorf("sentences %q, want first %q", got, want)
	}
	if d := delta(res[0].Comparisons[0]); !strings.HasPrefix(d, "+806 [") || !strings.Contains(d, "from 0") {
		t.Errorf("delta %q, want the difference from 0", d)
	}
}

func TestAnalyzeHolm(t *testing.T) {
	// Two metrics, each alone significant at p=0.0079 (5+5, complete
	// separation), Holm across two: 0.0159 and 0.0159.
	two := []Side{{Name: "A"}, {Name: "B"}}
	a := []float64{1.0, 1.01, 1.02, 1.03, 1.04}
	b := []float64{1.2, 1.21, 1.22, 1.23, 1.24}
	ws := windowsOf("cpu", false, a, b)
	for i := range ws {
		ws[i].Values["wakeups"] = ws[i].Values["cpu"]
	}
	res := Analyze(two, ws, []Metric{metricCPU, metricWakeups}, Options{Alpha: 0.05})
	for _, mr := range res {
		c := mr.Comparisons[0]
		if !near(c.P, 2.0/252, 1e-9) || !near(c.PAdj, 4.0/252, 1e-9) {
			t.Errorf("%s: p=%v p_holm=%v, want %v and %v", mr.Metric.Name, c.P, c.PAdj, 2.0/252, 4.0/252)
		}
	}
	// Ten looks planned: each p is held to alpha/10, which 5+5 rank tests
	// cannot reach (0.0079 > 0.0025), so Welch on logs stands in and its p
	// is multiplied by the looks, then by Holm.
	res = Analyze(two, ws, []Metric{metricCPU, metricWakeups}, Options{Alpha: 0.05, Looks: 10})
	c := res[0].Comparisons[0]
	if c.Welch == nil {
		t.Fatalf("with 10 looks and 5+5 windows Welch did not stand in: %+v", c)
	}
	if want := min(1, 2*10*c.Welch.P); !near(c.PAdj, want, 1e-9) {
		t.Errorf("p_holm %v, want 2 x 10 x %v = %v", c.PAdj, c.Welch.P, want)
	}
}

func TestOutliers(t *testing.T) {
	ws := windowsOf("cpu", false, []float64{10, 10.1, 9.9, 10, 10.2, 9.8, 30}, []float64{10, 10, 10, 10, 10})
	flagOutliers(ws, []Metric{metricCPU}, 2)
	var flagged []int
	for _, w := range ws {
		if len(w.Outliers) > 0 {
			flagged = append(flagged, w.Index)
		}
	}
	if len(flagged) != 1 || flagged[0] != 6 {
		t.Errorf("outliers at %v, want window 6 only", flagged)
	}
}

// goldenResult is a result built by hand, so the report writers can be
// checked against golden files.
func goldenResult() *Result {
	sides := []Side{{Name: "A", Command: "./srv -old", URL: "http://127.0.0.1:8080/", Lives: 1},
		{Name: "B", Command: "./srv -new", URL: "http://127.0.0.1:8080/", Lives: 1}}
	r := &Result{Sides: sides, Protocol: Protocol{WindowsPerSide: 6, WindowSeconds: 10, SyscallSeconds: 2, WarmupSeconds: 3,
		Order: "ABBABAABABBA", Seed: 42, Rate: 1000, Pinning: "every side on CPUs 0-1", Isolation: "one side's process runs at a time",
		Syscalls: "exact per-task tracepoint counters"}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cpuA := []float64{20.1, 20.4, 19.8, 20.0, 20.3, 19.9}
	p99 := []float64{1.10, 1.12, 1.08, 1.11, 1.09, 1.10}
	for i, side := range []int{0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0} {
		k := i / 2
		v := cpuA[k]
		if side == 1 {
			v *= 1.31
		}
		r.Windows = append(r.Windows, Window{Index: len(r.Windows), Side: side, Kind: kindCPU, Life: 1, Round: k + 1,
			Start: t0.Add(time.Duration(i) * 12 * time.Second), Seconds: 10,
			Values:   map[string]float64{"cpu": v, "wakeups": 1500 + float64(k), "p99": p99[k], "threads": 7},
			Requests: 10000, AchievedRate: 1000})
		r.Windows = append(r.Windows, Window{Index: len(r.Windows), Side: side, Kind: kindSyscalls, Life: 1, Round: k + 1,
			Start: t0.Add(time.Duration(i)*12*time.Second + 10*time.Second), Seconds: 2,
			Values: map[string]float64{"syscalls": 5000 * (1 + 0.2*float64(side)) * (1 + 0.001*float64(k)), "syscall.futex": 2000 * (1 + 0.001*float64(k))}})
	}
	r.Windows[4].Dropped, r.Windows[4].Why = true, "achieved 98.0% of the target rate"
	r.finish(Options{Primary: []string{"cpu", "p99"}})
	r.Seconds = 170.2
	r.Time = TimeSpent{CPUWindows: 130.1, Dropped: 10, SyscallWindows: 26.3, Starts: 1, Starting: 0.4, Warmup: 3}
	return r
}

func TestReportGolden(t *testing.T) {
	r := goldenResult()
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"report.txt", func(b *bytes.Buffer) error { return r.WriteText(b) }},
		{"report.json", func(b *bytes.Buffer) error { return r.WriteJSON(b) }},
		{"report.bench", func(b *bytes.Buffer) error { return r.WriteBench(b) }},
		{"report.html", func(b *bytes.Buffer) error { return r.WriteHTML(b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(&b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, b.Bytes())
		})
	}
	var b bytes.Buffer
	r.WriteText(&b)
	if !strings.Contains(b.String(), "B uses 31% more CPU than A (worse") {
		t.Errorf("text report lacks the CPU sentence:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "P99") || !strings.Contains(b.String(), "Unchanged") {
		t.Errorf("text report does not say P99 is unchanged:\n%s", b.String())
	}
}

func TestJSONNaN(t *testing.T) {
	// A metric A has no value for, and one ratio that does not exist: the
	// JSON still encodes (null).
	r := &Result{Sides: []Side{{Name: "A"}, {Name: "B"}}}
	r.Windows = windowsOf("cpu", false, []float64{0, 0, 0}, []float64{1, 2, 3})
	r.finish(Options{})
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"est": null`) {
		t.Errorf("want a null ratio in:\n%s", b.String())
	}
	if math.IsNaN(r.Metrics[0].Comparisons[0].Ratio.Est) == false {
		t.Errorf("ratio over a zero baseline = %v, want NaN", r.Metrics[0].Comparisons[0].Ratio.Est)
	}
}

// TestAnalyzePaired: windows that carry their round are paired when the
// pairs can reach the comparison's share of the level; the same values
// without rounds, or with too few pairs for the share, are not.
func TestAnalyzePaired(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	a, b, _ := pairedData(10, 1.03, 11)
	withRounds := func(ws []Window) []Window {
		for i := range ws {
			ws[i].Round = i%len(a) + 1
		}
		return ws
	}
	for _, tc := range []struct {
		name    string
		ws      []Window
		opts    Options
		paired  bool
		verdict string
	}{
		{"rounds", withRounds(windowsOf("cpu", false, a, b)), Options{}, true, Worse},
		{"no rounds", windowsOf("cpu", false, a, b), Options{}, false, Unknown},
		// 40 looks hold each to 0.05/40, half of which 10 pairs (at best
		// 2/1024) cannot reach.
		{"level out of reach", withRounds(windowsOf("cpu", false, a, b)), Options{Looks: 40}, false, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Analyze(two, tc.ws, []Metric{metricCPU}, tc.opts)
			c := res[0].Comparisons[0]
			if c.Paired != tc.paired || c.Verdict != tc.verdict {
				t.Fatalf("paired %v verdict %q, want %v and %q (p %v, pairs %d)", c.Paired, c.Verdict, tc.paired, tc.verdict, c.P, c.Pairs)
			}
			if c.Pairs != 10 && tc.name != "no rounds" {
				t.Errorf("%d pairs, want 10", c.Pairs)
			}
			if tc.paired && (c.SignedRank == nil || c.P > 2.0/1024+1e-12) {
				t.Errorf("paired p %v (signed-rank %+v), want 2/1024", c.P, c.SignedRank)
			}
		})
	}
	// A round with two windows of a side pairs nothing.
	if got := pairUp([]int{1, 1, 2, 3}, []int{1, 2, 0}); !slices.Equal(got, []Pair{{A: 2, B: 1}}) {
		t.Errorf("pairUp: %v, want [{2 1}]", got)
	}
}

// TestHTML: one chart per metric with windows, every kept window a dot,
// nothing that runs or loads, and the sides' names escaped.
func TestHTML(t *testing.T) {
	r := goldenResult()
	r.Sides[1].Name = "B<script>"
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "<script") || strings.Contains(page, "src=") || strings.Contains(page, "href=") {
		t.Errorf("the page runs or loads something:\n%.500s", page)
	}
	if got, want := strings.Count(page, "<svg"), len(r.Metrics); got != want {
		t.Errorf("%d charts, want one per metric (%d)", got, want)
	}
	kept := 0
	for _, m := range r.Metrics {
		for _, w := range r.Windows {
			if _, ok := w.Values[m.Metric.Name]; ok && !w.Dropped && w.Kind == m.Metric.Kind {
				kept++
			}
		}
	}
	// Each side's legend entry is a dot too.
	if got, want := strings.Count(page, "<circle"), kept+2*len(r.Metrics); got != want {
		t.Errorf("%d dots, want %d windows and %d legend dots", got, kept, 2*len(r.Metrics))
	}
	if !strings.Contains(page, "B&lt;script&gt;") {
		t.Errorf("the side's name is not escaped")
	}
}

// TestSmallSampleText: at 2 windows a side no median has a 95% interval
// and the rank interval of the change cannot reach its test's level; the
// table says so instead of showing "± ∞", or an interval clear of 0 (here
// below -100%, taken on differences because a window of B is 0) next to
// a "~" that the test did not call.
func TestSmallSampleText(t *testing.T) {
	r := &Result{Sides: []Side{{Name: "A", Command: "./a"}, {Name: "B", Command: "./b"}},
		Windows: windowsOf("cpu", false, []float64{200, 196}, []float64{0, 3})}
	r.finish(Options{})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "CPU") {
			row = l
		}
	}
	if row == "" {
		t.Fatalf("no CPU row in %q", out)
	}
	for _, bad := range []string{"∞", "[", "-101"} {
		if strings.Contains(row, bad) {
			t.Errorf("row %q holds %q", row, bad)
		}
	}
	for _, want := range []string{"198.0 ± ?", "too few windows for an interval", "n=2+2"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q lacks %q", row, want)
		}
	}
	if !strings.Contains(out, "± ?: a median's 95% interval needs 6 windows a side (here as few as 2)") {
		t.Errorf("no note on \"± ?\" in %q", out)
	}
}

// TestOrderString: the schedule names two sides by their first letters
// only where those tell them apart; a sweep's values, which share theirs,
// are numbered (it printed "GGGG").
func TestOrderString(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"A", "B"}, "ABBA"},
		{[]string{"GOMAXPROCS=1", "GOMAXPROCS=2"}, "1 2 2 1"},
		{[]string{"x", "y", "z"}, "1 2 2 1"},
	} {
		var sides []Side
		for _, n := range tc.names {
			sides = append(sides, Side{Name: n})
		}
		if got := orderString(sides, []int{0, 1, 1, 0}); got != tc.want {
			t.Errorf("order of %v: %q, want %q", tc.names, got, tc.want)
		}
	}
}
