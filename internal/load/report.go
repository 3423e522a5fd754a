package load

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
)

// WriteJSON writes the report as one JSON object. The time series is left
// out unless withTicks.
func (r *Report) WriteJSON(w io.Writer, withTicks bool) error {
	c := *r
	if !withTicks {
		c.Ticks = nil
		if g := c.GCSpikes; g != nil {
			gc := *g
			gc.GCCycles = nil
			c.GCSpikes = &gc
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(&c); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

func fmtRate(v float64) string {
	if v == 0 {
		return "max"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteText writes the per-step table and, for a search, its outcome.
func (r *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s, %d connections, %s\n", r.Method, r.URL, r.Connections, r.Proto)
	fmt.Fprintf(&b, "latency in ms, corrected from the intended send time (unc: from the actual send)\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	watch := false
	for _, s := range r.Steps {
		watch = watch || s.Target != nil
	}
	// CPU is in % of a core, as every other command prints it (JSON keeps
	// cores).
	hdrs := "step\tphase\ttarget/s\tachieved/s\tp50\tp90\tp99\tp99.9\tmax\tunc p99\terrors\tlag p99\tconns\tgen cpu%\t"
	if watch {
		hdrs += "tgt usr%\ttgt sys%\ttgt rss\tthr\tcs/s\t"
	}
	if r.SLA != nil || (len(r.Steps) > 0 && r.Steps[0].SLA != nil) {
		hdrs += "sla\t"
	}
	fmt.Fprintln(tw, hdrs+"valid\t")
	for _, s := range r.Steps {
		l := s.Latency
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%.1f\t", s.Index, s.Phase,
			fmtRate(s.TargetRate), s.AchievedRate, fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.P999),
			fmtMS(l.Max), fmtMS(s.Uncorrected.P99), s.Errors, fmtMS(s.Lag.P99), s.MaxConnections, 100*s.GenCPU)
		if watch {
			if t := s.Target; t != nil {
				fmt.Fprintf(tw, "%.1f\t%.1f\t%s\t%d\t%.0f\t", 100*t.CPUUser, 100*t.CPUSys, units.Bytes(t.RSSMaxBytes), t.MaxThreads,
					t.VolCtxsw+t.InvolCtxsw)
			} else {
				fmt.Fprint(tw, "-\t-\t-\t-\t-\t")
			}
		}
		if s.SLA != nil {
			fmt.Fprintf(tw, "%s\t", map[bool]string{true: "met", false: "FAIL"}[s.SLA.Met])
		} else if r.SLA != nil {
			fmt.Fprint(tw, "-\t")
		}
		v := "yes"
		if !s.Valid {
			v = "NO"
		}
		fmt.Fprintf(tw, "%s\t\n", v)
	}
	tw.Flush()
	for _, s := range r.Steps {
		if len(s.Invalid) > 0 {
			fmt.Fprintf(&b, "step %d invalid: %s\n", s.Index, strings.Join(s.Invalid, "; "))
		}
		if len(s.ErrorKinds) > 0 {
			fmt.Fprintf(&b, "step %d errors: %s\n", s.Index, kv(s.ErrorKinds))
		}
		if t := s.Target; t != nil && t.GCCycles != nil {
			fmt.Fprintf(&b, "step %d target GC (%s): %d cycles", s.Index, t.GCSource, *t.GCCycles)
			if t.GCPauses != nil {
				fmt.Fprintf(&b, ", %d pauses", *t.GCPauses)
			}
			if t.GCPauseP99MS != nil {
				fmt.Fprintf(&b, ", pause p99 %s ms, max %s ms", fmtMS(*t.GCPauseP99MS), fmtMS(*t.GCPauseMaxMS))
			}
			b.WriteString("\n")
		} else if t != nil && t.GCNote != "" && r.Notes == nil {
			fmt.Fprintf(&b, "step %d target GC: %s\n", s.Index, t.GCNote)
		}
	}
	if g := r.GCSpikes; g != nil && g.Tied {
		fmt.Fprintf(&b, "target GC: %s\n", g.Summary)
	}
	if s := r.SLA; s != nil {
		fmt.Fprintf(&b, "\nSLA %s: ", s.SLA)
		if s.Found {
			fmt.Fprintf(&b, "max rate %.0f/s (repeats %v, spread %.0f-%.0f); ramp passed at %g",
				s.MaxRate, s.Repeats, s.Min, s.Max, s.LastPass)
			if s.FirstFail > 0 {
				fmt.Fprintf(&b, ", failed at %g", s.FirstFail)
			} else {
				b.WriteString(", no rate of the ramp failed")
			}
			if s.FailReason != "" {
				fmt.Fprintf(&b, " (%s)", s.FailReason)
			}
			b.WriteString("\n")
		} else {
			fmt.Fprintf(&b, "not found\n")
		}
		if s.Note != "" {
			fmt.Fprintf(&b, "  %s\n", s.Note)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Interrupted {
		b.WriteString("interrupted: the report covers what ran\n")
	}
	_, err := io.WriteString(w, termsafe.String(b.String())) // error texts quote the server
	return err
}

func kv(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// WriteCSV writes the time series, one row per tick.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"t_s", "step", "warmup", "target_rate", "requests", "rate", "errors",
		"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "uncorrected_p99_ms", "lag_p99_ms", "lag_max_ms",
		"backlog", "in_flight", "connections", "generator_cpu_cores",
		"target_cpu_user_cores", "target_cpu_sys_cores", "target_rss_bytes", "target_threads",
		"target_vol_ctxsw_per_s", "target_invol_ctxsw_per_s", "target_gc_cycles"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, t := range r.Ticks {
		row := []string{f(t.T), strconv.Itoa(t.Step), strconv.FormatBool(t.Warmup), f(t.TargetRate),
			strconv.FormatInt(t.Requests, 10), f(t.Rate), strconv.FormatInt(t.Errors, 10),
			f(t.Latency.P50), f(t.Latency.P90), f(t.Latency.P99), f(t.Latency.P999), f(t.Latency.Max),
			f(t.UncorrectedP99), f(t.Lag.P99), f(t.Lag.Max), strconv.FormatInt(t.Backlog, 10),
			strconv.FormatInt(t.InFlight, 10), strconv.FormatInt(t.Connections, 10), f(t.GenCPU)}
		if x := t.Target; x != nil {
			gc := ""
			if x.GCCycles != nil {
				gc = strconv.FormatUint(*x.GCCycles, 10)
			}
			row = append(row, f(x.CPUUser), f(x.CPUSys), strconv.FormatUint(x.RSSBytes, 10),
				strconv.Itoa(int(x.Threads)), f(x.VolCtxsw), f(x.InvolCtxsw), gc)
		} else {
			row = append(row, "", "", "", "", "", "", "")
		}
		cw.Write(row)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// WriteHistogramLog writes the per-tick corrected latency histograms in the
// HdrHistogram interval log format (values in microseconds), readable by
// HdrHistogram's log processors and plotters.
func (r *Report) WriteHistogramLog(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "#[Histogram log format version 1.3]\n")
	fmt.Fprintf(&b, "#[gosleuth load: corrected latency, values in microseconds]\n")
	fmt.Fprintf(&b, "#[StartTime: %.3f (seconds since epoch), %s]\n", float64(r.Start.UnixMilli())/1e3,
		r.Start.UTC().Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(&b, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n")
	for _, l := range r.hlog {
		fmt.Fprintf(&b, "%.3f,%.3f,%.3f,%s\n", l.start, l.length, l.maxMS, l.payload)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WritePercentiles writes one step's corrected percentile distribution in
// HdrHistogram's .hgrm text format (values in milliseconds).
func (s *StepResult) WritePercentiles(w io.Writer) error {
	if s.hist == nil || s.hist.TotalCount() == 0 {
		_, err := fmt.Fprintf(w, "# step %d: no requests measured\n", s.Index)
		return err
	}
	_, err := s.hist.PercentilesPrint(w, 5, 1000)
	return err
}

// WriteDir writes every artifact into dir (created if needed): report.txt,
// report.json (with the time series), series.csv, latency.hlog,
// step-NN.hgrm and step-NN-uncorrected.hgrm per step, and report.html.
// Each file is written completely or not at all.
func (r *Report) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create report directory: %w", err)
	}
	files := []struct {
		name string
		fn   func(io.Writer) error
	}{
		{"report.txt", r.WriteText},
		{"report.json", func(w io.Writer) error { return r.WriteJSON(w, true) }},
		{"series.csv", r.WriteCSV},
		{"latency.hlog", r.WriteHistogramLog},
		{"report.html", r.WriteHTML},
	}
	for _, s := range r.Steps {
		files = append(files, struct {
			name string
			fn   func(io.Writer) error
		}{fmt.Sprintf("step-%02d.hgrm", s.Index), s.WritePercentiles})
		u := &StepResult{Index: s.Index, hist: s.uhist}
		files = append(files, struct {
			name string
			fn   func(io.Writer) error
		}{fmt.Sprintf("step-%02d-uncorrected.hgrm", s.Index), u.WritePercentiles})
	}
	for _, f := range files {
		if err := atomicfile.Write(filepath.Join(dir, f.name), f.fn); err != nil {
			return err
		}
	}
	return nil
}
