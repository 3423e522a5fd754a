package load

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// series is one line of a chart.
type series struct {
	name string
	pts  [][2]float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// svgChart draws a line chart as inline SVG. xfmt labels the x ticks.
func svgChart(title, xlabel, ylabel string, ss []series, xmin, xmax float64, xticks []float64, xfmt func(float64) string) string {
	const w, h, l, r, t, bm = 720.0, 300.0, 60.0, 150.0, 30.0, 40.0
	ymax := 0.0
	for _, s := range ss {
		for _, p := range s.pts {
			ymax = max(ymax, p[1])
		}
	}
	ymax = niceMax(ymax)
	if xmax <= xmin {
		xmax = xmin + 1
	}
	px := func(x float64) float64 { return l + (x-xmin)/(xmax-xmin)*(w-l-r) }
	py := func(y float64) float64 { return h - bm - y/ymax*(h-t-bm) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="14" font-weight="bold">%s</text>`, l, html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, l, t, w-l-r, h-t-bm)
	for i := 0; i <= 4; i++ {
		y := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, l, w-r, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%g</text>`, l-4, py(y)+4, y)
	}
	for _, x := range xticks {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#eee"/>`, px(x), px(x), t, h-bm)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, px(x), h-bm+14, html.EscapeString(xfmt(x)))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`, l+(w-l-r)/2, h-6, html.EscapeString(xlabel))
	fmt.Fprintf(&b, `<text x="14" y="%.0f" text-anchor="middle" transform="rotate(-90 14 %.0f)">%s</text>`,
		t+(h-t-bm)/2, t+(h-t-bm)/2, html.EscapeString(ylabel))
	for i, s := range ss {
		col := palette[i%len(palette)]
		if len(s.pts) > 0 {
			var d strings.Builder
			for j, p := range s.pts {
				cmd := "L"
				if j == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, px(p[0]), py(min(p[1], ymax)))
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, d.String(), col)
		}
		ly := t + 14*float64(i) + 8
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/>`, w-r+10, w-r+28, ly, ly, col)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`, w-r+32, ly+4, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func timeTicks(xmax float64) []float64 {
	step := niceMax(xmax / 8)
	var out []float64
	for x := 0.0; x <= xmax+1e-9; x += step {
		out = append(out, x)
	}
	return out
}

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
	b.WriteString(svgChart("Latency (corrected from the intended send time)", "time", "ms",
		[]series{p50, p99, p999, up99, lag}, 0, xmax, xt, sec))
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
