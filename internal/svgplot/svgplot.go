// Package svgplot draws the small line and dot charts of gosleuth's
// self-contained HTML reports (load, compare) as inline SVG: no script, no
// fonts, nothing fetched, so a report opens anywhere and can be archived.
// It is written here rather than taken from a chart library because a
// report needs one fixed layout and the libraries that produce static SVG
// bring far more than that.
package svgplot

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one line, or one set of dots, of a chart.
type Series struct {
	Name   string
	Points [][2]float64
	// Dots draws each point as a dot and no line.
	Dots bool
	// Dashed draws the line dashed (a reference: a median, a target).
	Dashed bool
	// Color picks a palette entry by its index plus one (0: by the
	// series' place in the chart).
	Color int
}

// Palette is the colour cycle of the series.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// Chart is one chart's content and axes.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	XMin, XMax            float64
	XTicks                []float64
	// XFmt labels the x ticks (%g when nil).
	XFmt func(float64) string
	// FitY fits the y axis to the data's range (with a margin) instead of
	// starting it at 0: for values that differ by a few percent.
	FitY bool
	// Bands shade spans of the x axis behind the series (GC cycles on a
	// latency chart), at least a pixel wide; BandName labels them in the
	// legend.
	Bands    []Band
	BandName string
}

// Band is a span of the x axis, [From, To].
type Band struct{ From, To float64 }

// bandFill is the colour of the bands.
const bandFill = "#f2c14e"

// bandRects returns the bands as pixel spans within [lo, hi], each at
// least a pixel wide, those less than a pixel apart merged (so a chart of
// thousands of short bands stays small).
func bandRects(bands []Band, px func(float64) float64, lo, hi float64) [][2]float64 {
	var out [][2]float64
	for _, b := range bands {
		a, z := max(px(b.From), lo), min(px(b.To), hi)
		if math.IsNaN(a) || math.IsNaN(z) || z < lo || a > hi || z < a {
			continue
		}
		z = max(z, a+1)
		if n := len(out); n > 0 && a <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], z)
			continue
		}
		out = append(out, [2]float64{a, z})
	}
	return out
}

// NiceMax rounds v up to 1, 2 or 5 times a power of ten.
func NiceMax(v float64) float64 {
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

// Ticks returns about n evenly spaced round values from 0 to xmax.
func Ticks(xmax float64, n int) []float64 {
	step := NiceMax(xmax / float64(n))
	var out []float64
	for x := 0.0; x <= xmax+1e-9; x += step {
		out = append(out, x)
	}
	return out
}

// yRange is the y axis: from 0 to a round maximum, or fitted to the data.
func (c *Chart) yRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if math.IsNaN(p[1]) || math.IsInf(p[1], 0) {
				continue
			}
			lo, hi = min(lo, p[1]), max(hi, p[1])
		}
	}
	if math.IsInf(hi, -1) {
		return 0, 1
	}
	if !c.FitY {
		return 0, NiceMax(hi)
	}
	pad := (hi - lo) * 0.1
	if pad == 0 {
		pad = math.Max(math.Abs(hi)*0.05, 1e-9)
	}
	return lo - pad, hi + pad
}

// SVG draws the chart.
func (c *Chart) SVG() string {
	const w, h, l, r, t, bm = 720.0, 300.0, 60.0, 150.0, 30.0, 40.0
	ymin, ymax := c.yRange()
	xmin, xmax := c.XMin, c.XMax
	if xmax <= xmin {
		xmax = xmin + 1
	}
	xfmt := c.XFmt
	if xfmt == nil {
		xfmt = func(x float64) string { return fmt.Sprintf("%g", x) }
	}
	px := func(x float64) float64 { return l + (x-xmin)/(xmax-xmin)*(w-l-r) }
	py := func(y float64) float64 { return h - bm - (min(max(y, ymin), ymax)-ymin)/(ymax-ymin)*(h-t-bm) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`, w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="14" font-weight="bold">%s</text>`, l, html.EscapeString(c.Title))
	for _, rc := range bandRects(c.Bands, px, l, w-r) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s" fill-opacity="0.45"/>`, rc[0], t, rc[1]-rc[0], h-t-bm, bandFill)
	}
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, l, t, w-l-r, h-t-bm)
	for i := 0; i <= 4; i++ {
		y := ymin + (ymax-ymin)*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, l, w-r, py(y), py(y))
		lab := fmt.Sprintf("%g", y)
		if c.FitY {
			lab = label(y, ymax-ymin)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, l-4, py(y)+4, lab)
	}
	for _, x := range c.XTicks {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#eee"/>`, px(x), px(x), t, h-bm)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, px(x), h-bm+14, html.EscapeString(xfmt(x)))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`, l+(w-l-r)/2, h-6, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text x="14" y="%.0f" text-anchor="middle" transform="rotate(-90 14 %.0f)">%s</text>`,
		t+(h-t-bm)/2, t+(h-t-bm)/2, html.EscapeString(c.YLabel))
	for i, s := range c.Series {
		ci := i
		if s.Color > 0 {
			ci = s.Color - 1
		}
		col := Palette[ci%len(Palette)]
		switch {
		case len(s.Points) == 0:
		case s.Dots:
			for _, p := range s.Points {
				if !math.IsNaN(p[1]) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, px(p[0]), py(p[1]), col)
				}
			}
		default:
			var d strings.Builder
			for j, p := range s.Points {
				cmd := "L"
				if j == 0 {
					cmd = "M"
				}
				fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, px(p[0]), py(p[1]))
			}
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="5 3"`
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>`, d.String(), col, dash)
		}
		ly := t + 14*float64(i) + 8
		if s.Dots {
			fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="3" fill="%s"/>`, w-r+19, ly, col)
		} else {
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/>`, w-r+10, w-r+28, ly, ly, col)
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`, w-r+32, ly+4, html.EscapeString(s.Name))
	}
	if len(c.Bands) > 0 && c.BandName != "" {
		ly := t + 14*float64(len(c.Series)) + 8
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="18" height="8" fill="%s" fill-opacity="0.45"/>`, w-r+10, ly-4, bandFill)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`, w-r+32, ly+4, html.EscapeString(c.BandName))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// label writes a y tick with as many digits as the axis's span needs.
func label(y, span float64) string {
	if span <= 0 {
		return fmt.Sprintf("%g", y)
	}
	digits := max(0, 2-int(math.Floor(math.Log10(span))))
	return fmt.Sprintf("%.*f", digits, y)
}
