package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// jfloat is a float that encodes NaN and infinities as JSON null.
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// MarshalJSON encodes s with null for figures that do not exist.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		N        int    `json:"n"`
		Median   jfloat `json:"median"`
		Lo       jfloat `json:"ci_lo"`
		Hi       jfloat `json:"ci_hi"`
		Coverage jfloat `json:"ci_coverage"`
		CIOK     bool   `json:"ci_ok"`
	}{s.N, jfloat(s.Median), jfloat(s.Lo), jfloat(s.Hi), jfloat(s.Coverage), s.CIOK})
}

// MarshalJSON encodes t with null for a test not run.
func (t Test) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Stat  jfloat `json:"stat"`
		P     jfloat `json:"p"`
		Exact bool   `json:"exact"`
	}{jfloat(t.Stat), jfloat(t.P), t.Exact})
}

// MarshalJSON encodes r with null for a ratio that does not exist.
func (r Ratio) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Est    jfloat `json:"est"`
		Lo     jfloat `json:"lo"`
		Hi     jfloat `json:"hi"`
		Method string `json:"method"`
	}{jfloat(r.Est), jfloat(r.Lo), jfloat(r.Hi), r.Method})
}

// MarshalJSON encodes c with null for p-values not computed.
func (c Comparison) MarshalJSON() ([]byte, error) {
	type plain Comparison
	return json.Marshal(struct {
		plain
		P    jfloat `json:"p"`
		PAdj jfloat `json:"p_holm"`
	}{plain(c), jfloat(c.P), jfloat(c.PAdj)})
}

// WriteJSON writes the whole result, every window included.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode compare result: %w", err)
	}
	return nil
}

// pm formats a summary as benchstat does, "2.10 ± 3%", and "2.10 ± ?"
// when there are too few windows for an interval (noteNoCI says so under
// the table).
func pm(s Summary) string {
	if s.N == 0 {
		return "n/a"
	}
	v := fmtVal(s.Median)
	if !s.CIOK {
		return v + " ± ?"
	}
	if s.Median == 0 {
		return v + " ± " + fmtVal(math.Max(s.Hi-s.Median, s.Median-s.Lo))
	}
	rel := math.Max(s.Hi-s.Median, s.Median-s.Lo) / math.Abs(s.Median)
	return fmt.Sprintf("%s ± %.0f%%", v, 100*rel)
}

// noteNoCI is the line under the table that explains "± ?", or "" when
// every median has its interval.
func noteNoCI(r *Result) string {
	fewest := 0
	for _, m := range r.Metrics {
		for _, s := range m.Sides {
			if s.N > 0 && !s.CIOK && (fewest == 0 || s.N < fewest) {
				fewest = s.N
			}
		}
	}
	if fewest == 0 {
		return ""
	}
	return fmt.Sprintf("± ?: a median's 95%% interval needs 6 windows a side (here as few as %d); the change's test and interval do not need it", fewest)
}

// rankIntervalShort reports whether c's ratio interval is the rank one
// (Hodges-Lehmann) with samples too small for it to reach the level of
// its test: at n=2+2 the widest interval, the smallest to the largest
// difference, covers only 2/3, and a change the test does not call would
// show an interval clear of 0.
func rankIntervalShort(c Comparison) bool {
	return c.Welch == nil && !c.Paired && strings.HasPrefix(c.Ratio.Method, "hodges-lehmann") && minMWUP(c.N, c.M) > 0.05
}

// delta formats a comparison: "-80.5% [-82%, -78%] (p=0.000 n=10+10)",
// "~" when not significant, and no interval where the samples are too
// small for one at the test's level.
func delta(c Comparison) string {
	switch {
	case c.Verdict == NotTested:
		return "(not tested: one process a side)"
	case math.IsNaN(c.Ratio.Est) && c.Shift != nil && !math.IsNaN(c.Shift.Est):
		// No ratio from a median of 0: the difference, in the unit.
		head := fmt.Sprintf("%+.4g", c.Shift.Est)
		if c.Verdict != Better && c.Verdict != Worse {
			head = "~"
		}
		return fmt.Sprintf("%s [%+.4g, %+.4g] (p=%s n=%d+%d, from 0)", head, c.Shift.Lo, c.Shift.Hi, fmtP(c.PAdj), c.N, c.M)
	case math.IsNaN(c.Ratio.Est):
		return fmt.Sprintf("? (n=%d+%d)", c.N, c.M)
	case rankIntervalShort(c):
		head := pct(c.Ratio.Est)
		if c.Verdict != Better && c.Verdict != Worse {
			head = "~"
		}
		return fmt.Sprintf("%s (p=%s n=%d+%d, too few windows for an interval)", head, fmtP(c.PAdj), c.N, c.M)
	}
	ci := fmt.Sprintf("[%s, %s]", pct(c.Ratio.Lo), pct(c.Ratio.Hi))
	head := pct(c.Ratio.Est)
	if c.Verdict != Better && c.Verdict != Worse {
		head = "~"
	}
	test := ""
	switch {
	case c.Welch != nil:
		test = " welch"
	case c.Paired && c.Load != nil && c.Load.Used:
		test = " paired, load adjusted"
	case c.Paired:
		test = " paired"
	}
	return fmt.Sprintf("%s %s (p=%s n=%d+%d%s)", head, ci, fmtP(c.PAdj), c.N, c.M, test)
}

func pct(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return "?"
	}
	// The metrics are never negative, so neither is a ratio of them: an
	// interval's end below 0 (one taken on the differences, scaled by A's
	// median) is shown at the bound it cannot pass.
	r = max(r, 0)
	return fmt.Sprintf("%+.1f%%", 100*(r-1))
}

func unitLabel(m Metric) string {
	if m.Unit == "" {
		return m.Label
	}
	return m.Label + " (" + m.Unit + ")"
}

// WriteText writes the benchstat-shaped table, the sentences and the notes.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, s := range r.Sides {
		switch {
		case s.Command != "":
			fmt.Fprintf(&b, "%s: %s", s.Name, s.Command)
			if len(s.Env) > 0 {
				fmt.Fprintf(&b, "  (env %s)", strings.Join(s.Env, " "))
			}
		default:
			fmt.Fprintf(&b, "%s: PID %d", s.Name, s.PID)
		}
		if s.URL != "" {
			fmt.Fprintf(&b, "  under %s", s.URL)
		}
		b.WriteByte('\n')
	}
	p := r.Protocol
	fmt.Fprintf(&b, "protocol: %d windows a side of %s", p.WindowsPerSide, secs(p.WindowSeconds))
	if p.SyscallSeconds > 0 {
		fmt.Fprintf(&b, " (+ as many syscall windows of %s)", secs(p.SyscallSeconds))
	}
	if p.Rate > 0 {
		fmt.Fprintf(&b, " at %g requests/s", p.Rate)
	}
	fmt.Fprintf(&b, ", warm-up %s, randomized ABBA order %s (seed %d)\n", secs(p.WarmupSeconds), abbrev(p.Order), p.Seed)
	fmt.Fprintf(&b, "CPUs: %s\n", p.Pinning)
	fmt.Fprintf(&b, "isolation: %s\n", p.Isolation)
	fmt.Fprintf(&b, "syscalls: %s\n", p.Syscalls)
	if line := loadLine(r); line != "" {
		fmt.Fprintf(&b, "load cost: %s\n", line)
	}
	if len(p.Primary) > 0 {
		fmt.Fprintf(&b, "tests: weighted Holm at %g: %s share %.0f%% of it, the other metrics %.0f%%\n\n",
			p.Alpha, strings.Join(p.Primary, ", "), 100*p.PrimaryShare, 100*(1-p.PrimaryShare))
	} else {
		fmt.Fprintf(&b, "tests: Holm at %g across the metrics\n\n", p.Alpha)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if len(r.Sides) == 2 {
		fmt.Fprintf(tw, "\t%s\t%s\tvs %s\t\n", r.Sides[0].Name, r.Sides[1].Name, r.Sides[0].Name)
		for _, m := range r.Metrics {
			c := m.Comparisons[0]
			verdict := c.Verdict
			if verdict == Same || verdict == NotTested {
				verdict = ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", unitLabel(m.Metric), pm(m.Sides[0]), pm(m.Sides[1]), delta(c), verdict)
		}
	} else {
		fmt.Fprintf(tw, "\tmedian\tvs %s\t\n", r.Sides[0].Name)
		for _, m := range r.Metrics {
			fmt.Fprintf(tw, "%s\t\t\t\n", unitLabel(m.Metric))
			for i, s := range r.Sides {
				row := "  " + s.Name + "\t" + pm(m.Sides[i]) + "\t"
				if i > 0 {
					c := m.Comparisons[i-1]
					verdict := c.Verdict
					if verdict == Same || verdict == NotTested {
						verdict = ""
					}
					row += delta(c) + "\t" + verdict
				} else {
					row += "\t"
				}
				fmt.Fprintln(tw, row)
			}
		}
	}
	tw.Flush()
	if n := noteNoCI(r); n != "" {
		b.WriteString(n + "\n")
	}
	b.WriteByte('\n')
	for _, s := range r.Sentences {
		b.WriteString(s + "\n")
	}
	if r.Best != "" {
		fmt.Fprintf(&b, "Best: %s.\n", strings.TrimPrefix(r.Best, "best "))
	}
	if len(r.DecidedAt) > 0 {
		var keys []string
		for k := range r.DecidedAt {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s after %d", k, r.DecidedAt[k]))
		}
		fmt.Fprintf(&b, "Decided (windows a side): %s.\n", strings.Join(parts, ", "))
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if t := r.Time; r.Seconds > 0 {
		fmt.Fprintf(&b, "time: %s in all: CPU windows %s", secs(r.Seconds), secs(t.CPUWindows))
		if t.Dropped > 0 {
			fmt.Fprintf(&b, " (%s of them dropped and retaken)", secs(t.Dropped))
		}
		if t.SyscallWindows > 0 {
			fmt.Fprintf(&b, ", syscall windows %s", secs(t.SyscallWindows))
		}
		switch {
		case t.Starts == 1:
			fmt.Fprintf(&b, ", 1 start %s", secs(t.Starting))
		case t.Starts > 1:
			fmt.Fprintf(&b, ", %d starts %s", t.Starts, secs(t.Starting))
		}
		other := r.Seconds - t.CPUWindows - t.SyscallWindows - t.Starting - t.Warmup
		fmt.Fprintf(&b, ", warm-up %s, the rest %s\n", secs(t.Warmup), secs(max(other, 0)))
	}
	if r.Error != "" {
		b.WriteString("stopped early: " + r.Error + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%gs", math.Round(s*100)/100)
}

func abbrev(s string) string {
	if len(s) > 48 {
		return s[:45] + "..."
	}
	return s
}

// benchUnit is the unit of m in Go's benchmark format: no spaces, and
// named so that benchstat's tables read as ours.
func benchUnit(m Metric) string {
	u := strings.NewReplacer(" ", "-", "%", "pct").Replace(m.Name)
	switch m.Unit {
	case "%core":
		return u + "-pct-core"
	case "":
		return u
	case "%":
		return u + "-pct"
	}
	if strings.HasPrefix(m.Unit, "/") {
		return u + m.Unit
	}
	return u + "-" + m.Unit
}

// WriteBench writes every kept window in Go's benchmark format, one
// configuration block per side ("side: NAME") and one benchmark line per
// window, with a Unit line per metric saying which way is better, so that
// benchstat reproduces the medians, intervals and U-test of our table.
func (r *Result) WriteBench(w io.Writer) error {
	var b strings.Builder
	b.WriteString("goos: linux\n")
	for _, m := range r.Metrics {
		better := "lower"
		if m.Metric.HigherIsBetter {
			better = "higher"
		}
		fmt.Fprintf(&b, "Unit %s better=%s assume=nothing\n", benchUnit(m.Metric), better)
	}
	b.WriteByte('\n')
	last := -1
	for _, win := range r.Windows {
		if win.Dropped {
			continue
		}
		if win.Side != last {
			fmt.Fprintf(&b, "side: %s\n", r.Sides[win.Side].Name)
			last = win.Side
		}
		name := "BenchmarkCPUWindow"
		if win.Kind == kindSyscalls {
			name = "BenchmarkSyscallWindow"
		}
		line := name + " 1"
		for _, m := range r.Metrics {
			if m.Metric.Kind != win.Kind {
				continue
			}
			v, ok := win.Values[m.Metric.Name]
			if !ok || math.IsNaN(v) {
				continue
			}
			line += " " + strconv.FormatFloat(v, 'g', 7, 64) + " " + benchUnit(m.Metric)
		}
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// loadLine says how CPU was tested against the load generator's own CPU,
// or "" when no CPU comparison carries it.
func loadLine(r *Result) string {
	for _, m := range r.Metrics {
		if m.Metric.Name != metricCPU.Name || len(m.Comparisons) == 0 || m.Comparisons[0].Load == nil {
			continue
		}
		l := m.Comparisons[0].Load
		var gen []float64
		for _, win := range r.Windows {
			if v := win.Values[loadCPUKey]; v > 0 && !win.Dropped {
				gen = append(gen, v)
			}
		}
		line := fmt.Sprintf("the load generator used %s%% of a core (compare's process less its sampler; median of the windows; B/A %.3f, p=%s)",
			fmtVal(median(sorted(gen))), l.Load, fmtP(l.LoadP))
		if !l.Used {
			return line + "; CPU pairs not adjusted: " + l.Why + " (the table's p is the randomization test's, which applies the same rule under every swap of the pairs)"
		}
		return fmt.Sprintf("%s; CPU pairs taken net of it: CPU moved %.2f%% per 1%% of it within the sides (correlation %.2f); the raw pairs' p was %s, the table's is the randomization test's of the adjusted pairs",
			line, l.Slope, l.Corr, fmtP(l.Unadjusted))
	}
	return ""
}
