package load

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/gosleuth/gosleuth/internal/svgplot"
)

// series is one line of a chart.
type series struct {
	name string
	pts  [][2]float64
}

// svgChart draws a line chart from 0 up. xfmt labels the x ticks.
func svgChart(title, xlabel, ylabel string, ss []series, xmin, xmax float64, xticks []float64, xfmt func(float64) string) string {
	return chartOf(title, xlabel, ylabel, ss, xmin, xmax, xticks, xfmt).SVG()
}

func chartOf(title, xlabel, ylabel string, ss []series, xmin, xmax float64, xticks []float64, xfmt func(float64) string) *svgplot.Chart {
	c := &svgplot.Chart{Title: title, XLabel: xlabel, YLabel: ylabel, XMin: xmin, XMax: xmax, XTicks: xticks, XFmt: xfmt}
	for _, s := range ss {
		c.Series = append(c.Series, svgplot.Series{Name: s.name, Points: s.pts})
	}
	return c
}

// maxFinePoints bounds the fine series drawn: longer runs are drawn as
// the highest window of each group.
const maxFinePoints = 3000

// gcLatencyChart adds to c the GC cycles as bands, the P99 of the short
// windows (the highest of each group where they are too many to draw) and
// the spikes as dots.
func (r *Report) gcLatencyChart(c *svgplot.Chart) {
	g := r.GCSpikes
	if g == nil {
		return
	}
	for _, cy := range r.cycles {
		c.Bands = append(c.Bands, svgplot.Band{From: float64(cy.start) / 1e9, To: float64(cy.end) / 1e9})
	}
	c.BandName = "GC cycles"
	group := (len(r.fine) + maxFinePoints - 1) / maxFinePoints
	var fine svgplot.Series
	fine.Name = fmt.Sprintf("p99 per %g ms", g.WindowMS)
	fine.Color = 8
	for i := 0; i < len(r.fine); i += max(group, 1) {
		var top fineWin
		for _, w := range r.fine[i:min(i+max(group, 1), len(r.fine))] {
			if w.p99 >= top.p99 {
				top = w
			}
		}
		fine.Points = append(fine.Points, [2]float64{float64(top.start+r.fineWidth/2) / 1e9, float64(top.p99) / 1e3})
	}
	spikes := svgplot.Series{Name: "P99 spikes", Dots: true, Color: 6}
	for _, s := range g.List {
		spikes.Points = append(spikes.Points, [2]float64{(s.Start + s.End) / 2, s.P99MS})
	}
	c.Series = append(c.Series, fine)
	if len(spikes.Points) > 0 {
		c.Series = append(c.Series, spikes)
	}
}

func timeTicks(xmax float64) []float64 { return svgplot.Ticks(xmax, 8) }

// WriteHTML writes a self-contained page (inline SVG, no script, no
// network): latency and rate over time, the target's CPU and RSS, the
// percentile distribution of each step, and the step table.
func (r *Report) WriteHTML(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gosleuth load report</title>\n")
	b.WriteString("<style>body{font-family:sans-serif;margin:20px}table{border-collapse:collapse;font-size:12px}" +
		"td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}.bad{background:#fdd}pre{font-size:12px}</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>gosleuth load</h1><p>%s %s &mdash; %d connections, %s, started %s</p>\n",
		html.EscapeString(r.Method), html.EscapeString(r.URL), r.Connections, html.EscapeString(r.Proto),
		r.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	xmax := 0.0
	if n := len(r.Ticks); n > 0 {
		xmax = r.Ticks[n-1].T
	}
	xt := timeTicks(xmax)
	sec := func(x float64) string { return fmt.Sprintf("%gs", x) }
	var p50, p99, p999, up99, rate, target, cpuU, cpuS, rss, lag series
	p50.name, p99.name, p999.name, up99.name = "p50", "p99", "p99.9", "p99 uncorrected"
	rate.name, target.name, lag.name = "achieved", "target", "generator lag p99"
	cpuU.name, cpuS.name, rss.name = "user", "sys", "RSS MiB"
	for _, t := range r.Ticks {
		p50.pts = append(p50.pts, [2]float64{t.T, t.Latency.P50})
		p99.pts = append(p99.pts, [2]float64{t.T, t.Latency.P99})
		p999.pts = append(p999.pts, [2]float64{t.T, t.Latency.P999})
		up99.pts = append(up99.pts, [2]float64{t.T, t.UncorrectedP99})
		lag.pts = append(lag.pts, [2]float64{t.T, t.Lag.P99})
		rate.pts = append(rate.pts, [2]float64{t.T, t.Rate})
		if t.TargetRate > 0 {
			target.pts = append(target.pts, [2]float64{t.T, t.TargetRate})
		}
		if x := t.Target; x != nil {
			cpuU.pts = append(cpuU.pts, [2]float64{t.T, x.CPUUser})
			cpuS.pts = append(cpuS.pts, [2]float64{t.T, x.CPUSys})
			rss.pts = append(rss.pts, [2]float64{t.T, float64(x.RSSBytes) / (1 << 20)})
		}
	}
	b.WriteString("<h2>Over time</h2>\n")
	lc := chartOf("Latency (corrected from the intended send time)", "time", "ms",
		[]series{p50, p99, p999, up99, lag}, 0, xmax, xt, sec)
	r.gcLatencyChart(lc)
	b.WriteString(lc.SVG())
	if g := r.GCSpikes; g != nil {
		fmt.Fprintf(&b, "<p>Target GC: %s.</p>\n", html.EscapeString(gcSpikesText(g)))
	}
	b.WriteString(svgChart("Request rate", "time", "requests/s", []series{target, rate}, 0, xmax, xt, sec))
	if len(rss.pts) > 0 {
		b.WriteString(svgChart("Target CPU", "time", "cores", []series{cpuU, cpuS}, 0, xmax, xt, sec))
		b.WriteString(svgChart("Target RSS", "time", "MiB", []series{rss}, 0, xmax, xt, sec))
	}
	// Percentile plot: x is log10(1/(1-q)), so 90%, 99%, 99.9% are evenly
	// spaced.
	var ps []series
	for _, s := range r.Steps {
		if s.hist == nil || s.hist.TotalCount() == 0 {
			continue
		}
		se := series{name: fmt.Sprintf("step %d @ %s/s", s.Index, fmtRate(s.TargetRate))}
		for _, q := range []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.999} {
			x := math.Log10(1 / (1 - q/100))
			se.pts = append(se.pts, [2]float64{x, float64(s.hist.ValueAtQuantile(q)) / 1e3})
		}
		ps = append(ps, se)
	}
	if len(ps) > 0 {
		b.WriteString("<h2>Latency by percentile, per step</h2>\n")
		qfmt := func(x float64) string {
			return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", 100*(1-math.Pow(10, -x))), "0"), ".") + "%"
		}
		b.WriteString(svgChart("Corrected latency by percentile", "percentile", "ms", ps, 0, 5,
			[]float64{0, 1, 2, 3, 4, 5}, qfmt))
	}
	b.WriteString("<h2>Steps</h2>\n<pre>")
	var txt bytes.Buffer
	r.WriteText(&txt)
	b.WriteString(html.EscapeString(txt.String()))
	b.WriteString("</pre>\n</body></html>\n")
	_, err := w.Write(b.Bytes())
	return err
}
