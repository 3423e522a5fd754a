package load

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const msNS = int64(time.Millisecond)

// windows makes a step of n windows of width w from 0, each with p99 base
// µs, except the windows at the indices in slow, with p99 high; each
// window's first tail request is due a fifth into it.
func windows(n int, w int64, base, high uint32, slow ...int) []fineWin {
	out := make([]fineWin, n)
	for i := range out {
		out[i] = fineWin{start: int64(i) * w, tail: int64(i)*w + w/5, n: 50, p99: base, max: base, step: 1}
	}
	for _, i := range slow {
		out[i].p99, out[i].max = high, high
	}
	return out
}

// cyclesAt makes 5 ms cycles starting at the given milliseconds.
func cyclesAt(startsMS ...int64) []gcCycle {
	var out []gcCycle
	for _, s := range startsMS {
		out = append(out, gcCycle{start: s * msNS, end: (s + 5) * msNS, startRead: true, hasCPU: true,
			assist: 3 * time.Millisecond, total: 10 * time.Millisecond})
	}
	return out
}

// TestAnalyzeGCSpikes: spikes that fall where the cycles are tie; spikes
// elsewhere, too few spikes, or cycles covering most of the time do not;
// the assist share and the GC's cores are those of the cycles the spikes
// fall within.
func TestAnalyzeGCSpikes(t *testing.T) {
	const w = 50 * msNS
	poll := 10 * time.Millisecond
	for _, tc := range []struct {
		name      string
		wins      []fineWin
		cycles    []gcCycle
		spikes    int
		inGC      int
		tied      bool
		assistPct float64 // -1: none
	}{
		{"spikes at the cycles", windows(200, w, 1000, 30000, 20, 60, 100, 140, 180),
			append(cyclesAt(1010, 3020, 5000, 7015, 9010), cyclesAt(2000, 4000)...), 5, 5, true, 30},
		{"a cycle after the slowness began is not its cause", windows(200, w, 1000, 30000, 20, 60, 100, 140, 180),
			cyclesAt(1025, 3025, 5025, 7025, 9025), 5, 0, false, -1},
		{"spikes away from the cycles", windows(200, w, 1000, 30000, 20, 60, 100, 140, 180),
			cyclesAt(500, 2500, 4500, 6500, 8500), 5, 0, false, -1},
		{"two spikes are not enough", windows(200, w, 1000, 30000, 20, 60),
			cyclesAt(1010, 3020), 2, 2, false, 30},
		{"cycles cover everything", windows(200, w, 1000, 30000, 20, 60, 100, 140, 180),
			func() []gcCycle {
				var c []gcCycle
				for s := int64(0); s < 10000; s += 40 {
					c = append(c, cyclesAt(s)...)
				}
				return c
			}(), 5, 5, false, 30},
		{"jitter under the floor is no spike", windows(200, w, 100, 900, 20, 60, 100), cyclesAt(1010, 3020, 5000), 0, 0, false, -1},
		{"runs of spike windows are one spike", windows(200, w, 1000, 30000, 20, 21, 22, 100, 101),
			cyclesAt(1010, 5020), 2, 2, false, 30},
		{"a spike that began before a cycle is not in it", windows(200, w, 1000, 30000, 20, 21, 22, 60, 61, 62, 100, 101, 102),
			cyclesAt(1060, 3060, 5060), 3, 0, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := analyzeGCSpikes(tc.wins, w, tc.cycles, poll)
			if g.Spikes != tc.spikes || g.InGC != tc.inGC || g.Tied != tc.tied {
				t.Errorf("%d spikes, %d in GC, tied %v (expected %.2f, p %.3g); want %d, %d, %v",
					g.Spikes, g.InGC, g.Tied, g.Expected, g.PValue, tc.spikes, tc.inGC, tc.tied)
			}
			switch {
			case tc.assistPct < 0 && g.AssistShare != nil:
				t.Errorf("assist share %v, want none", *g.AssistShare)
			case tc.assistPct >= 0 && (g.AssistShare == nil || math.Abs(100**g.AssistShare-tc.assistPct) > 0.01):
				t.Errorf("assist share %v, want %v%%", g.AssistShare, tc.assistPct)
			case tc.assistPct >= 0 && (g.GCCores == nil || math.Abs(*g.GCCores-2) > 1e-9):
				// 10 ms of GC CPU in each 5 ms cycle.
				t.Errorf("GC cores %v, want 2", g.GCCores)
			}
			if g.Tied != strings.Contains(g.Summary, "P99 spikes fall within GC cycles") {
				t.Errorf("tied %v, summary %q", g.Tied, g.Summary)
			}
			if g.Expected < 0 || g.Expected > float64(g.Spikes) || g.PValue < 0 || g.PValue > 1 {
				t.Errorf("expected %v of %d spikes, p %v", g.Expected, g.Spikes, g.PValue)
			}
		})
	}
}

// TestAnalyzeGCSpikesStall: a stall that answers nothing leaves no window;
// the spike after it reaches back over the gap, into the cycle that
// caused it.
func TestAnalyzeGCSpikesStall(t *testing.T) {
	const w = 50 * msNS
	wins := windows(200, w, 1000, 1000)
	// Nothing answered in windows 40-43 (a 200 ms stall from 2.0 s), then
	// the queue drains slowly.
	wins = append(wins[:40], wins[44:]...)
	wins[40].p99 = 200_000
	g := analyzeGCSpikes(wins, w, cyclesAt(2010), 10*time.Millisecond)
	if g.Spikes != 1 || g.InGC != 1 || len(g.List) != 1 || g.List[0].Start != 2.0 {
		t.Errorf("spikes %+v, %d in GC; want one from 2.0 s, in GC", g.List, g.InGC)
	}
}

// TestTailAtLeast checks the Poisson-binomial tail against counting
// every outcome.
func TestTailAtLeast(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		n := 1 + r.IntN(8)
		ps := make([]float64, n)
		for i := range ps {
			ps[i] = r.Float64()
		}
		for k := 0; k <= n+1; k++ {
			var want float64
			for mask := 0; mask < 1<<n; mask++ {
				p, c := 1.0, 0
				for i := range n {
					if mask&(1<<i) != 0 {
						p *= ps[i]
						c++
					} else {
						p *= 1 - ps[i]
					}
				}
				if c >= k {
					want += p
				}
			}
			if got := tailAtLeast(ps, k); math.Abs(got-want) > 1e-9 {
				t.Fatalf("tailAtLeast(%v, %d) = %v, want %v", ps, k, got, want)
			}
		}
	}
}

// TestFineSeries: requests are cut into windows by their intended time,
// each with its count, P99 and max; windows close when a tick has passed;
// requests due before the step are late; warm-up windows are marked.
func TestFineSeries(t *testing.T) {
	const tick = 100 * time.Millisecond
	f := newFineSeries(20*time.Millisecond, tick)
	t0 := 1_000 * msNS
	f.startStep(1, t0, 1)
	var pts []finePoint
	for i := range 100 { // window 0: 1..100 µs
		pts = append(pts, finePoint{at: t0 + int64(i)*100_000, us: uint32(i + 1)})
	}
	pts = append(pts, finePoint{at: t0 - 1, us: 5})                // before the step: late
	pts = append(pts, finePoint{at: t0 + 110*msNS, us: 7000})      // second tick
	pts = append(pts, finePoint{at: t0 + 150*msNS - 1, us: 42000}) // second tick, window 7
	f.add(pts, t0+int64(tick))
	if len(f.wins) != 1 || f.late != 1 || len(f.pending) != 2 {
		t.Fatalf("after the first tick: %d windows, %d late, %d pending; want 1, 1, 2", len(f.wins), f.late, len(f.pending))
	}
	// The tail (latency at the P99 or more) begins with the request of 99
	// µs, due 9.8 ms into the window.
	if w := f.wins[0]; w.n != 100 || w.p99 != 99 || w.max != 100 || !w.warmup || w.start != t0 || w.tail != t0+98*100_000 {
		t.Errorf("window 0: %+v", w)
	}
	f.close(t0 + 2*int64(tick))
	if len(f.wins) != 3 || f.wins[2].p99 != 42000 || f.wins[2].start != t0+140*msNS || f.wins[2].warmup {
		t.Errorf("windows %+v", f.wins)
	}
	for _, tc := range []struct {
		rate float64
		want time.Duration
	}{{0, 20 * time.Millisecond}, {100, 500 * time.Millisecond}, {1000, 50 * time.Millisecond}, {5000, 10 * time.Millisecond}, {10, time.Second}} {
		if got := fineWidth(tc.rate, time.Second); got != tc.want {
			t.Errorf("fineWidth(%v) = %v, want %v", tc.rate, got, tc.want)
		}
	}
}
