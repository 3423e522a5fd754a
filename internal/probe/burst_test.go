package probe

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestPlanBursts: hot functions are all burst-probed while the budget
// affords two 5 ms bursts of them together; else the dearest go first.
func TestPlanBursts(t *testing.T) {
	cost := func(int) float64 { return 1000 } // 1 µs a call
	tests := []struct {
		name         string
		hot          []int
		rates        []float64
		budgetNS     float64
		keepNSPerSec float64
		burst, ref   []int
	}{
		// 1% of 2 s = 20 ms; 40,000 calls/s cost 40 ms/s: 450 ms of bursts.
		{"one hot", []int{0}, []float64{40_000}, 20e6, 0, []int{0}, nil},
		{"two hot", []int{0, 1}, []float64{40_000, 10_000}, 20e6, 0, []int{0, 1}, nil},
		// 10 M calls/s cost 10 s/s: 1.8 ms of bursts, short of 10 ms.
		{"far too hot", []int{0, 1}, []float64{10_000_000, 10_000}, 20e6, 0, []int{1}, []int{0}},
		// The functions probed throughout take the whole budget.
		{"budget taken", []int{1}, []float64{0, 40_000}, 20e6, 9e6, nil, []int{1}},
		{"none", nil, nil, 20e6, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, r := planBursts(tt.hot, tt.rates, cost, tt.budgetNS, tt.keepNSPerSec, 2*time.Second)
			if !slices.Equal(b, tt.burst) || !slices.Equal(r, tt.ref) {
				t.Errorf("bursts %v refused %v, want %v and %v", b, r, tt.burst, tt.ref)
			}
		})
	}
}

// TestNextBurst: the duty is what the budget left pays for over the time
// left, spread over the period; none when it pays for less than 5 ms.
func TestNextBurst(t *testing.T) {
	period := 200 * time.Millisecond
	tests := []struct {
		name                string
		leftNS              float64
		remaining           time.Duration
		keepNSPerSec, hotNS float64
		wantOn, wantOff     time.Duration
		wantDuty            float64 // on/(on+off), when on > 0
	}{
		// 18 ms left over 2 s, 40 ms/s while attached: 450 ms on, 22.5%.
		{"quarter", 18e6, 2 * time.Second, 0, 40e6, 45 * time.Millisecond, 155 * time.Millisecond, 0.225},
		// The functions probed throughout take 8 ms of the 18.
		{"keep", 18e6, 2 * time.Second, 4e6, 40e6, 25 * time.Millisecond, 175 * time.Millisecond, 0.125},
		// A low duty still gives 5 ms bursts, further apart.
		{"short", 1e6, 2 * time.Second, 0, 40e6, 5 * time.Millisecond, 395 * time.Millisecond, 0.0125},
		{"spent", 0.1e6, 2 * time.Second, 0, 40e6, 0, 0, 0},
		{"affords the rest", 100e6, time.Second, 0, 40e6, period, 0, 1},
		{"free", 1e6, time.Second, 0, 0, period, 0, 1},
		{"window over", 18e6, time.Millisecond, 0, 40e6, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			on, off := nextBurst(tt.leftNS, tt.remaining, tt.keepNSPerSec, tt.hotNS, period)
			if d := on - tt.wantOn; d > time.Microsecond || d < -time.Microsecond {
				t.Errorf("on %v, want %v", on, tt.wantOn)
			}
			if d := off - tt.wantOff; d > time.Microsecond || d < -time.Microsecond {
				t.Errorf("off %v, want %v", off, tt.wantOff)
			}
			if on > 0 {
				if duty := float64(on) / float64(on+off); math.Abs(duty-tt.wantDuty) > 1e-6 {
					t.Errorf("duty %.4f, want %.4f", duty, tt.wantDuty)
				}
			}
		})
	}
}

// TestBurstRate: the rate is the calls over the time attached; the margin
// three standard errors (the bursts' spread, or Poisson's with fewer than
// three) plus the edges.
func TestBurstRate(t *testing.T) {
	edge := 2 * BurstEdge.Seconds()
	tests := []struct {
		name         string
		counts       []uint64
		on           []float64
		rate, margin float64
	}{
		// Equal bursts at one rate: only the Poisson error and the edges.
		{"steady", []uint64{1000, 1000, 1000, 1000}, []float64{0.05, 0.05, 0.05, 0.05}, 20000, 3*math.Sqrt(4000)/0.2 + 20000*edge*4/0.2},
		// Rates of 10,000 and 30,000 a second alternate: their spread.
		{"spread", []uint64{500, 1500, 500, 1500}, []float64{0.05, 0.05, 0.05, 0.05}, 20000, 3*math.Sqrt(0.05*4*1e8/3/0.2) + 20000*edge*4/0.2},
		{"two bursts", []uint64{400, 600}, []float64{0.05, 0.05}, 10000, 3*math.Sqrt(1000)/0.1 + 10000*edge*2/0.1},
		{"nothing attached", []uint64{}, []float64{}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, margin := burstRate(tt.counts, tt.on)
			if math.Abs(rate-tt.rate) > 1e-6*max(1, tt.rate) || math.Abs(margin-tt.margin) > 1e-6*max(1, tt.margin) {
				t.Errorf("rate %.3f ± %.3f, want %.3f ± %.3f", rate, margin, tt.rate, tt.margin)
			}
		})
	}
}

// TestShareBudget: the functions probed throughout keep at most 90% of the
// budget while none needs bursts, half of that once some do; the dearest
// move to the bursts first.
func TestShareBudget(t *testing.T) {
	cost := func(int) float64 { return 1000 }
	const budget = 10e6 // 1% of a CPU, in ns a second
	tests := []struct {
		name           string
		keep, hot      []int
		rates          []float64
		wantKeep, want []int
	}{
		{"fits", []int{0, 1}, nil, []float64{3000, 4000}, []int{0, 1}, nil},
		// 9,500 calls/s alone fits the budget, but not with the other:
		// it moves, and the bursts then leave the cheap one half.
		{"sum over", []int{0, 1}, nil, []float64{3000, 9500}, []int{0}, []int{1}},
		// A burst is needed: the one at 6,000 calls/s exceeds half.
		{"half for bursts", []int{0, 1}, []int{2}, []float64{1000, 6000, 50000}, []int{0}, []int{1, 2}},
		{"nothing kept", nil, []int{0}, []float64{50000}, nil, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, h := shareBudget(tt.keep, tt.hot, tt.rates, cost, budget)
			if !slices.Equal(k, tt.wantKeep) || !slices.Equal(h, tt.want) {
				t.Errorf("kept %v, bursts %v; want %v and %v", k, h, tt.wantKeep, tt.want)
			}
		})
	}
}
