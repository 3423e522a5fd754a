package doctor

import (
	"slices"
	"testing"

	"github.com/gosleuth/gosleuth/internal/window"
)

// TestGCMargin: the case, 23% of 1.75 cores in GC (18.8%
// background, 4.1% assist) was a gc-assist warning in one run and nothing
// in another. Over the shares runs of it give (sampling noise of a few
// points either way) the answer is one: a GC warning, its assist a
// symptom. A quiet process at 40% GC and a busy batch job at 10% get no
// GC finding at all.
func TestGCMargin(t *testing.T) {
	gcWin := func(cores float64, samples int, bg, assist float64) *Window {
		return win(4, func(w *Window) {
			w.UserSec = cores * 4
			w.Stacks = &Stacks{Samples: samples, Classes: map[string]float64{ClassGCBackground: bg, ClassGCAssist: assist, ClassUserCode: 1 - bg - assist}}
		})
	}
	h := &Host{CPUs: 2}
	for _, tc := range []struct {
		name       string
		cores      float64
		samples    int
		bg, assist float64
		want       []string
	}{
		{"issue run", 1.75, 700, 0.188, 0.041, []string{"gc-pressure"}},
		{"issue, assist high", 1.75, 700, 0.17, 0.055, []string{"gc-pressure"}},
		{"issue, GC low", 1.75, 700, 0.165, 0.03, []string{"gc-pressure"}},
		{"issue, GC high", 1.75, 700, 0.21, 0.05, []string{"gc-pressure"}},
		{"quarter of a small process", 0.3, 120, 0.2, 0.05, []string{"gc-pressure"}},
		{"quiet", 0.03, 40, 0.3, 0.1, nil},
		{"batch at GOGC=100", 1.9, 760, 0.09, 0.01, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, _ := Evaluate(gcWin(tc.cores, tc.samples, tc.bg, tc.assist), h)
			if got := warnIDs(fs); !slices.Equal(got, tc.want) {
				t.Errorf("warn-level findings %v, want %v:%s", got, tc.want, describe(fs))
			}
		})
	}
}

// TestGCSettings: a heap held under its memory limit and GOGC set low are
// named as the cause from a smaller share than the plain warning's, with
// the cycles against what GOGC alone would give.
func TestGCSettings(t *testing.T) {
	booksWin := func(gogc int32, limit int64, marked, goal uint64) *Window {
		return win(4, func(w *Window) {
			w.UserSec = 0.5 * 4
			w.Stacks = &Stacks{Samples: 400, Classes: map[string]float64{ClassGCBackground: 0.13, ClassUserCode: 0.87}}
			w.Runtime = nanRuntime()
			w.Runtime.From = "memory"
			w.Runtime.Books = &window.Books{Seconds: 4,
				Start: window.BookGC{Cycles: 100, GOGC: gogc, MemoryLimit: limit, HeapMarked: marked, HeapGoal: goal},
				End:   window.BookGC{Cycles: 900, GOGC: gogc, MemoryLimit: limit, HeapMarked: marked, HeapGoal: goal, AllocBytes: 800 << 20}}
		})
	}
	h := &Host{CPUs: 2}
	for _, tc := range []struct {
		name  string
		w     *Window
		warn  bool
		title string
	}{
		{"limit", booksWin(100, 100<<20, 95<<20, 190<<20), true, "the heap sits at its memory limit: the GC runs 200 times a second and takes 13% of CPU"},
		{"gogc", booksWin(10, window.NoMemoryLimit, 20<<20, 22<<20), true, "GOGC=10: the GC runs 200 times a second and takes 13% of CPU"},
		{"GOGC off under a limit", booksWin(-1, 100<<20, 95<<20, ^uint64(0)), true, "the heap sits at its memory limit: the GC runs 200 times a second and takes 13% of CPU"},
		{"default", booksWin(100, window.NoMemoryLimit, 20<<20, 40<<20), false, ""},
		{"limit far above", booksWin(100, 1<<30, 20<<20, 40<<20), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := checkGCPressure(tc.w, h)
			if (f != nil) != tc.warn {
				t.Fatalf("finding %v, want one: %v", f, tc.warn)
			}
			if f != nil && f.Title != tc.title {
				t.Errorf("title %q, want %q", f.Title, tc.title)
			}
		})
	}
}
