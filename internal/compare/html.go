package compare

import (
	"bytes"
	"html"
	"io"
	"math"

	"github.com/gosleuth/gosleuth/internal/svgplot"
)

// WriteHTML writes a self-contained page (inline SVG, no script, nothing
// fetched): the text report, then for each metric its windows in run order,
// one dot per window coloured by side with each side's median dashed, so
// drift over the run, outliers and the pairs of a round can be seen.
// Dropped windows are left out of the charts, as of the statistics.
func (r *Result) WriteHTML(w io.Writer) error {
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		return err
	}
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gosleuth compare</title>\n")
	b.WriteString("<style>body{font-family:sans-serif;margin:20px}pre{font-size:12px}</style></head><body>\n")
	b.WriteString("<h1>gosleuth compare</h1>\n<pre>")
	b.WriteString(html.EscapeString(text.String()))
	b.WriteString("</pre>\n<h2>Windows in run order</h2>\n")
	last := 0.0
	for _, win := range r.Windows {
		last = max(last, float64(win.Index))
	}
	for _, m := range r.Metrics {
		c := svgplot.Chart{Title: chartTitle(r, m), XLabel: "window (run order)", YLabel: unitLabel(m.Metric),
			XMin: -0.5, XMax: last + 0.5, XTicks: svgplot.Ticks(last, 10), FitY: true}
		drawn := false
		for s, side := range r.Sides {
			dots := svgplot.Series{Name: side.Name, Dots: true, Color: s + 1}
			for _, win := range r.Windows {
				v, ok := win.Values[m.Metric.Name]
				if win.Side != s || win.Dropped || win.Kind != m.Metric.Kind || !ok || math.IsNaN(v) || math.IsInf(v, 0) {
					continue
				}
				dots.Points = append(dots.Points, [2]float64{float64(win.Index), v})
			}
			if len(dots.Points) == 0 {
				continue
			}
			drawn = true
			c.Series = append(c.Series, dots)
			if s < len(m.Sides) && !math.IsNaN(m.Sides[s].Median) {
				med := m.Sides[s].Median
				c.Series = append(c.Series, svgplot.Series{Name: side.Name + " median", Dashed: true, Color: s + 1,
					Points: [][2]float64{{-0.5, med}, {last + 0.5, med}}})
			}
		}
		if drawn {
			b.WriteString(c.SVG())
		}
	}
	b.WriteString("</body></html>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// chartTitle names the metric and, for two sides, the comparison's line.
func chartTitle(r *Result, m MetricResult) string {
	t := unitLabel(m.Metric)
	if len(r.Sides) == 2 && len(m.Comparisons) == 1 {
		c := m.Comparisons[0]
		t += ": " + r.Sides[1].Name + " vs " + r.Sides[0].Name + " " + delta(c)
		if c.Verdict == Better || c.Verdict == Worse {
			t += " " + c.Verdict
		}
	}
	return t
}
