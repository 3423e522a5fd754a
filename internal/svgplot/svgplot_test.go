package svgplot

import (
	"strings"
	"testing"
)

func TestNiceMax(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.7, 1}, {1.2, 2}, {3, 5}, {7, 10}, {1000, 1000}, {1001, 2000},
	} {
		if got := NiceMax(tc.in); got != tc.want {
			t.Errorf("NiceMax(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestYRange(t *testing.T) {
	pts := [][2]float64{{0, 20.1}, {1, 26.3}}
	for _, tc := range []struct {
		name   string
		fit    bool
		lo, hi float64
	}{
		{"from zero", false, 0, 50},
		{"fitted with a tenth of the span either side", true, 20.1 - 0.62, 26.3 + 0.62},
	} {
		c := Chart{Series: []Series{{Points: pts}}, FitY: tc.fit}
		lo, hi := c.yRange()
		if d := lo - tc.lo; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: low %v, want %v", tc.name, lo, tc.lo)
		}
		if d := hi - tc.hi; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: high %v, want %v", tc.name, hi, tc.hi)
		}
	}
}

func TestSVG(t *testing.T) {
	c := Chart{Title: "a<b", Series: []Series{{Name: "A", Dots: true, Points: [][2]float64{{0, 1}, {1, 2}}},
		{Name: "median", Dashed: true, Points: [][2]float64{{0, 1.5}, {1, 1.5}}}}, XMax: 1, FitY: true}
	s := c.SVG()
	if n := strings.Count(s, "<circle"); n != 3 { // two dots and the legend's
		t.Errorf("%d circles, want 3", n)
	}
	if !strings.Contains(s, "stroke-dasharray") || !strings.Contains(s, "a&lt;b") || strings.Contains(s, "NaN") {
		t.Errorf("chart: %s", s)
	}
	// A series given a colour keeps it whatever its place: a side's
	// median is drawn in its dots' colour.
	c.Series[1].Color = 1
	if s := c.SVG(); strings.Contains(s, Palette[1]) || !strings.Contains(s, `stroke="`+Palette[0]+`" stroke-width="1.5" stroke-dasharray`) {
		t.Errorf("the median is not drawn in the first colour: %s", s)
	}
}

// TestBands: bands are drawn behind the series, at least a pixel wide,
// those less than a pixel apart merged into one, those outside the axis
// left out, and named in the legend.
func TestBands(t *testing.T) {
	px := func(x float64) float64 { return x }
	for _, tc := range []struct {
		name  string
		bands []Band
		want  [][2]float64
	}{
		{"one", []Band{{10, 20}}, [][2]float64{{10, 20}}},
		{"a pixel at least", []Band{{10, 10.1}}, [][2]float64{{10, 11}}},
		{"close ones merged", []Band{{10, 10.2}, {10.5, 10.6}, {30, 31}}, [][2]float64{{10, 11.5}, {30, 31}}},
		{"clipped to the axis", []Band{{-5, 3}, {95, 120}, {150, 160}}, [][2]float64{{0, 3}, {95, 100}}},
	} {
		got := bandRects(tc.bands, px, 0, 100)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
	c := Chart{Series: []Series{{Name: "p99", Points: [][2]float64{{0, 1}, {10, 2}}}}, XMax: 10,
		Bands: []Band{{2, 3}, {5, 6}}, BandName: "GC cycles"}
	s := c.SVG()
	if n := strings.Count(s, bandFill); n != 3 { // two bands and the legend's
		t.Errorf("%d shapes in the band colour, want 3: %s", n, s)
	}
	if !strings.Contains(s, "GC cycles") || strings.Index(s, bandFill) > strings.Index(s, "<path") {
		t.Errorf("bands not named, or drawn over the series: %s", s)
	}
}
