package compare

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The reference values below were computed with SciPy 1.17.1
// (scipy.stats.mannwhitneyu(a, b, alternative="two-sided") which, like R's
// wilcox.test, is exact without ties and below 50 a side and otherwise
// normal with tie and continuity corrections; scipy.stats.ks_2samp(a, b,
// method="exact"); scipy.stats.ttest_ind(log a, log b, equal_var=False)),
// except where a comment says they come from brute-force enumeration of all
// C(n+m, n) ways to split the pooled sample (Python, itertools.combinations)
// or from the binomial table.
var statCases = map[string][2][]float64{
	"separated5": {{1.1, 1.2, 1.3, 1.4, 1.5}, {2.1, 2.2, 2.3, 2.4, 2.5}},
	"overlap":    {{10.1, 10.4, 9.8, 10.0, 10.6, 9.9, 10.2, 10.3}, {10.5, 10.9, 10.7, 11.2, 10.8, 10.35, 11.0}},
	"ties":       {{1, 2, 2, 3, 4, 4, 5}, {2, 3, 3, 4, 5, 6, 6, 7}},
	"unequal":    {{3.2, 1.7, 4.9, 2.2, 5.5, 3.8}, {6.1, 4.4, 7.0, 5.9, 6.6, 5.1, 8.2, 4.8, 6.0}},
}

func near(got, want, rel float64) bool {
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.IsNaN(got) && math.IsNaN(want)
	}
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-300)
}

func TestMannWhitney(t *testing.T) {
	for _, tc := range []struct {
		name  string
		u, p  float64
		exact bool
	}{
		{"separated5", 0, 0.00793650793651, true}, // 2/C(10,5)
		{"overlap", 3, 0.0021756021756, true},
		{"ties", 14.5, 0.127602789181, false},
		{"unequal", 5, 0.00759240759241, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statCases[tc.name]
			got := MannWhitney(c[0], c[1])
			if got.Stat != tc.u || !near(got.P, tc.p, 1e-9) || got.Exact != tc.exact {
				t.Errorf("MannWhitney = %+v, want U=%v p=%v exact=%v", got, tc.u, tc.p, tc.exact)
			}
		})
	}
}

func TestKolmogorovSmirnov(t *testing.T) {
	for _, tc := range []struct {
		name string
		d, p float64
	}{
		{"separated5", 1, 0.00793650793651},
		{"overlap", 0.75, 0.0130536130536},
		// With ties SciPy's "exact" ignores them; the permutation p-value
		// given the ties is from brute-force enumeration of the C(15,7)
		// splits: 0.360372960373 (R >= 4.2's psmirnov gives the same).
		{"ties", 0.375, 0.360372960373},
		{"unequal", 2.0 / 3, 0.0611388611389},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statCases[tc.name]
			got := KolmogorovSmirnov(c[0], c[1])
			if !near(got.Stat, tc.d, 1e-12) || !near(got.P, tc.p, 1e-9) {
				t.Errorf("KolmogorovSmirnov = %+v, want D=%v p=%v", got, tc.d, tc.p)
			}
		})
	}
}

func TestKolmogorovSmirnovAsymptotic(t *testing.T) {
	// 120 a side: beyond the exact limit. a = 0..119, b = a + 20: D = 1/6,
	// and Kolmogorov's limit with n_eff = 60 is
	// scipy.special.kolmogorov(sqrt(60)/6) = 0.07134474750110735.
	var a, b []float64
	for i := range 120 {
		a = append(a, float64(i))
		b = append(b, float64(i+20))
	}
	got := KolmogorovSmirnov(a, b)
	if !near(got.Stat, 1.0/6, 1e-12) || got.Exact || !near(got.P, 0.07134474750110735, 1e-12) {
		t.Errorf("KolmogorovSmirnov = %+v, want D=1/6 p=0.0713 asymptotic", got)
	}
}

func TestWelchLog(t *testing.T) {
	for _, tc := range []struct {
		name string
		t, p float64
	}{
		{"separated5", 9.13701832768, 7.29099982856e-05},
		{"overlap", 4.26275462339, 0.000989114753554},
		{"ties", 1.70931700062, 0.114592343137},
		{"unequal", 2.99902540162, 0.0230013904853},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statCases[tc.name]
			got := WelchLog(c[0], c[1])
			if !near(got.Stat, tc.t, 1e-9) || !near(got.P, tc.p, 1e-7) {
				t.Errorf("WelchLog = %+v, want t=%v p=%v", got, tc.t, tc.p)
			}
		})
	}
	if p := WelchLog([]float64{1, 0}, []float64{1, 2}).P; !math.IsNaN(p) {
		t.Errorf("WelchLog with a zero = %v, want NaN", p)
	}
}

func TestStudentQuantile(t *testing.T) {
	// Two-sided 95% and 99% critical values from the t table.
	for _, tc := range []struct{ tail, df, want float64 }{
		{0.025, 1, 12.7062047},
		{0.025, 9, 2.26215716},
		{0.025, 30, 2.04227246},
		{0.005, 9, 3.24983554},
		{0.005, 4.5, 4.27282399}, // Welch's df need not be whole (scipy.stats.t.ppf)
	} {
		if got := studentQuantile(tc.tail, tc.df); !near(got, tc.want, 1e-6) {
			t.Errorf("studentQuantile(%v, %v) = %v, want %v", tc.tail, tc.df, got, tc.want)
		}
	}
}

// TestWelchRatioCI checks that Welch's interval of B/A clears 1 exactly
// when Welch's test is below the level, on random samples of the sizes
// where it stands in for the rank tests, and that it holds the estimate.
func TestWelchRatioCI(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	agree := 0
	for i := range 2000 {
		n, m := 2+rng.IntN(5), 2+rng.IntN(5)
		shift := rng.Float64() * 0.1
		a, b := make([]float64, n), make([]float64, m)
		for j := range a {
			a[j] = math.Exp(rng.NormFloat64() * 0.03)
		}
		for j := range b {
			b[j] = math.Exp(shift + rng.NormFloat64()*0.05)
		}
		p := WelchLog(a, b).P
		r := WelchRatioCI(a, b, 0.95)
		if !(r.Lo <= r.Est && r.Est <= r.Hi) || r.Method != "welch-log" {
			t.Fatalf("case %d: ratio %+v does not hold its estimate", i, r)
		}
		clears := r.Lo > 1 || r.Hi < 1
		if clears != (p < 0.05) && math.Abs(p-0.05) > 1e-6 {
			t.Fatalf("case %d: p=%v but the 95%% interval [%v, %v] %s 1", i, p, r.Lo, r.Hi, map[bool]string{true: "clears", false: "holds"}[clears])
		}
		if clears {
			agree++
		}
	}
	if agree == 0 {
		t.Errorf("no sample cleared 1: the cases test nothing")
	}
	if r := WelchRatioCI([]float64{1, 0}, []float64{1, 2}, 0.95); !math.IsNaN(r.Est) {
		t.Errorf("WelchRatioCI with a zero = %+v, want NaN", r)
	}
}

func TestSummarize(t *testing.T) {
	// k from the binomial table: the largest k with P(B(n,1/2) <= k-1) <=
	// 0.025; coverage 1 - 2 P(B <= k-1).
	for _, tc := range []struct {
		n, k     int
		coverage float64
	}{
		{5, 0, 0},
		{6, 1, 0.96875},
		{10, 2, 0.978515625},
		{20, 6, 0.9586105346679688},
	} {
		x := make([]float64, tc.n)
		for i := range x {
			x[i] = float64(tc.n - i) // reversed: Summarize sorts
		}
		s := Summarize(x, 0.95)
		if tc.k == 0 {
			if s.CIOK {
				t.Errorf("n=%d: CI %v..%v claimed, want none", tc.n, s.Lo, s.Hi)
			}
			continue
		}
		if !s.CIOK || s.Lo != float64(tc.k) || s.Hi != float64(tc.n-tc.k+1) || !near(s.Coverage, tc.coverage, 1e-12) {
			t.Errorf("n=%d: %+v, want [x(%d), x(%d)] coverage %v", tc.n, s, tc.k, tc.n-tc.k+1, tc.coverage)
		}
		if want := (float64(tc.n) + 1) / 2; s.Median != want {
			t.Errorf("n=%d: median %v, want %v", tc.n, s.Median, want)
		}
	}
}

func TestHolm(t *testing.T) {
	// By hand: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 is 0.02,
	// 0.03, 0.06, 0.04, made monotone: 0.02, 0.03, 0.06, 0.06.
	got := Holm([]float64{0.01, 0.04, math.NaN(), 0.03, 0.005})
	want := []float64{0.03, 0.06, math.NaN(), 0.06, 0.02}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("Holm = %v, want %v", got, want)
		}
	}
}

func TestRatioCI(t *testing.T) {
	// Brute force (Python): the median of the n*m log differences and the
	// ones ranked k and n*m+1-k, k the 2.5% quantile of the exact U
	// distribution (3 for 5+5, 11 for 6+9).
	for _, tc := range []struct {
		name        string
		est, lo, hi float64
	}{
		{"separated5", 1.769230769230769, 1.5, 2.090909090909091},
		{"unequal", 1.7048613124011052, 1.2, 2.823529411764706},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statCases[tc.name]
			got := RatioCI(c[0], c[1], 0.95)
			if !near(got.Est, tc.est, 1e-12) || !near(got.Lo, tc.lo, 1e-12) || !near(got.Hi, tc.hi, 1e-12) || got.Method != "hodges-lehmann-log" {
				t.Errorf("RatioCI = %+v, want %v [%v, %v]", got, tc.est, tc.lo, tc.hi)
			}
		})
	}
	// With a zero the shift of raw values is scaled by A's median.
	r := RatioCI([]float64{0, 2, 2, 2, 4}, []float64{3, 3, 3, 3, 3}, 0.95)
	if r.Method != "hodges-lehmann-shift" || !near(r.Est, 1.5, 1e-12) {
		t.Errorf("RatioCI with zero = %+v, want shift method, 1.5", r)
	}
	if r := RatioCI([]float64{0, 0, 0}, []float64{1, 2, 3}, 0.95); r.Method != "none" {
		t.Errorf("RatioCI with A all zero = %+v, want none", r)
	}
}

func TestMinP(t *testing.T) {
	for _, tc := range []struct {
		n, m int
		p    float64
	}{
		{3, 3, 0.1},            // 2/20
		{4, 4, 2.0 / 70},       // benchstat's uTestMinP: 0.029
		{5, 5, 2.0 / 252},      // 0.008
		{10, 10, 2.0 / 184756}, // 1.08e-5
	} {
		if got := minMWUP(tc.n, tc.m); !near(got, tc.p, 1e-9) {
			t.Errorf("minMWUP(%d,%d) = %v, want %v", tc.n, tc.m, got, tc.p)
		}
	}
}

func TestWeightedHolm(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name    string
		p, w    []float64
		want    []float64
		epsilon float64
	}{
		// Equal weights are Holm (the TestHolm case).
		{"equal", []float64{0.01, 0.04, nan, 0.03, 0.005}, []float64{1, 1, 1, 1, 1}, []float64{0.03, 0.06, nan, 0.06, 0.02}, 1e-12},
		// By hand: weights 0.8, 0.1, 0.1 (normalised over 1); p/w is
		// 0.0125, 0.1, 0.02, so the order is 0, 2, 1 with the weights
		// left 1, 0.2, 0.1: 0.0125, 0.02*0.2 = 0.004 -> kept monotone at
		// 0.0125, then 0.1*0.1 = 0.01 -> 0.0125.
		{"primary first", []float64{0.01, 0.01, 0.002}, []float64{8, 1, 1}, []float64{0.0125, 0.0125, 0.0125}, 1e-12},
		// The primary metric at p=0.006 among 19: plain Holm multiplies
		// by 19 (0.114, not significant); with 80% of the level on 4
		// primary metrics it gets 0.2 of it: 0.006/0.2 = 0.03.
		{"power", append([]float64{0.006, 0.5, 0.6, 0.7}, fill(15, 0.9)...), append([]float64{0.2, 0.2, 0.2, 0.2}, fill(15, 0.2/15)...),
			append([]float64{0.03, 1, 1, 1}, fill(15, 1)...), 1e-12},
		// A zero weight never rejects, and does not count in the others'.
		{"zero weight", []float64{0.0001, 0.01}, []float64{0, 1}, []float64{1, 0.01}, 1e-12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WeightedHolm(tc.p, tc.w)
			for i := range tc.want {
				if !near(got[i], tc.want[i], tc.epsilon) {
					t.Fatalf("WeightedHolm = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func fill(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// signedRankBrute is the signed-rank p-value by walking all 2^n sign
// patterns of the mid-ranks (the definition), for the recurrence to match.
func signedRankBrute(d []float64) float64 {
	var nz, mag []float64
	for _, x := range d {
		if x != 0 {
			nz = append(nz, x)
			mag = append(mag, math.Abs(x))
		}
	}
	r, _ := ranks(mag, nil)
	total, obs := 0.0, 0.0
	for i, x := range nz {
		total += r[i]
		if x > 0 {
			obs += r[i]
		}
	}
	dev := math.Abs(obs - total/2)
	hits := 0
	for mask := range 1 << len(nz) {
		w := 0.0
		for i := range nz {
			if mask&(1<<i) != 0 {
				w += r[i]
			}
		}
		if math.Abs(w-total/2) >= dev-1e-9 {
			hits++
		}
	}
	return float64(hits) / float64(int(1)<<len(nz))
}

func TestSignedRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     []float64
		wPlus float64
		p     float64 // 0: from signedRankBrute
	}{
		// Hollander & Wolfe, 3rd ed., Example 3.1 (Hamilton depression
		// scale, first visit minus second): T+ = 40, two-sided P = 2 x
		// 0.020 (exact tail 10/512 = 0.01953).
		{"hollander-wolfe", []float64{0.952, -0.147, 1.022, 0.43, 0.62, 0.59, 0.49, -0.08, 0.01}, 40, 20.0 / 512},
		// All of one sign, 10 pairs: the two extreme patterns of 1024.
		{"all positive", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 55, 2.0 / 1024},
		{"ties and zeros", []float64{0.5, -0.5, 1, 1, -1, 2, 0, 0.5, 3, -2}, 0, 0},
		{"balanced", []float64{1, -1, 2, -2, 3, -3}, 10.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SignedRank(tc.d)
			want := tc.p
			if want == 0 {
				want = signedRankBrute(tc.d)
			}
			if !near(got.P, want, 1e-9) || !got.Exact {
				t.Errorf("p %v (exact %v), want %v", got.P, got.Exact, want)
			}
			if tc.wPlus != 0 && got.Stat != tc.wPlus {
				t.Errorf("W+ %v, want %v", got.Stat, tc.wPlus)
			}
		})
	}
	// Large samples: the normal approximation agrees with the exact
	// distribution near the middle of its range.
	rng := rand.New(rand.NewPCG(1, 2))
	var d []float64
	for range 70 {
		d = append(d, rng.NormFloat64()+0.25)
	}
	approx := SignedRank(d)
	exact := signedRank(d, len(d)).P
	if approx.Exact || !near(approx.P, exact, 0.05) {
		t.Errorf("70 differences: normal p %v (exact %v), exact %v", approx.P, approx.Exact, exact)
	}
}

// pairedData is n rounds whose level moves by up to ±20% (a restarted
// process's own level, the machine's drift) with 0.3% noise inside a
// round; b is a times ratio.
func pairedData(n int, ratio float64, seed uint64) (a, b []float64, pairs []Pair) {
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range n {
		level := 100 * (0.8 + 0.4*rng.Float64())
		a = append(a, level*(1+0.003*rng.NormFloat64()))
		b = append(b, ratio*level*(1+0.003*rng.NormFloat64()))
		pairs = append(pairs, Pair{A: i, B: i})
	}
	return a, b, pairs
}

// TestPairedSignedRankPower: a 3% change under ±20% swings between rounds
// is lost to the unpaired tests and found by the pairs.
func TestPairedSignedRankPower(t *testing.T) {
	a, b, pairs := pairedData(10, 1.03, 11)
	unpaired := min(MannWhitney(a, b).P, KolmogorovSmirnov(a, b).P)
	sr := PairedSignedRank(a, b, pairs)
	t.Logf("10 pairs: unpaired p %.4f, signed-rank p %.5f", unpaired, sr.P)
	if unpaired < 0.1 {
		t.Errorf("the unpaired tests see the change through the swings (p %v): the data does not test pairing", unpaired)
	}
	if sr.P != minSignedRankP(10) {
		t.Errorf("signed-rank p %v, want %v (every pair says B is larger)", sr.P, minSignedRankP(10))
	}
	// Swapping every pair mirrors the statistic: the same p.
	if mirrored := PairedSignedRank(b, a, pairs); mirrored.P != sr.P {
		t.Errorf("swapped sides: p %v, want %v", mirrored.P, sr.P)
	}
	// A zero or negative value: differences instead of log ratios.
	a[0] = 0
	if p := PairedSignedRank(a, b, pairs).P; p != minSignedRankP(10) {
		t.Errorf("with a zero value: p %v, want %v", p, minSignedRankP(10))
	}
	if p := PairedSignedRank([]float64{1}, []float64{2}, []Pair{{0, 0}}).P; !math.IsNaN(p) {
		t.Errorf("one pair: p %v, want NaN", p)
	}
}

// TestPairedRatioCI checks the paired Hodges-Lehmann interval on a case
// counted by hand and its point: under swings between rounds it is
// narrower than the unpaired interval and still holds the true ratio.
func TestPairedRatioCI(t *testing.T) {
	// Log ratios 1..5: the 15 Walsh averages sorted are 1 1.5 2 2 2.5 2.5
	// 3 3 3 3.5 3.5 4 4 4.5 5; at 80% qsignrank(0.1, 5) = 3 (P(W+ <= 3) =
	// 5/32), so the interval runs from the 3rd smallest to the 3rd largest.
	a := []float64{1, 1, 1, 1, 1}
	b := []float64{math.E, math.Exp(2), math.Exp(3), math.Exp(4), math.Exp(5)}
	pairs := []Pair{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}}
	r := PairedRatioCI(a, b, pairs, 0.8)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"estimate", r.Est, math.Exp(3)}, {"low", r.Lo, math.Exp(2)}, {"high", r.Hi, math.Exp(4)}} {
		if math.Abs(c.got/c.want-1) > 1e-12 {
			t.Errorf("%s %v, want %v", c.name, c.got, c.want)
		}
	}
	if r.Method != "hodges-lehmann-paired-log" {
		t.Errorf("method %q", r.Method)
	}
	for _, c := range []struct {
		n    int
		conf float64
		want int
	}{{5, 0.8, 3}, {10, 0.95, 9}, {10, 0.99, 4}, {6, 0.95, 1}} {
		// R's qsignrank: at 95% with 10 pairs P(W+ <= 8) = 0.0244 <
		// 0.025 <= P(W+ <= 9) = 0.0322, so 9, and wilcox.test's interval
		// runs from the 9th smallest average to the 9th largest.
		if got := signedRankRank(c.n, c.conf); got != c.want {
			t.Errorf("signedRankRank(%d, %v) = %d, want %d", c.n, c.conf, got, c.want)
		}
	}

	a, b, pairs = pairedData(10, 1.03, 11)
	paired, unpaired := PairedRatioCI(a, b, pairs, 0.95), RatioCI(a, b, 0.95)
	t.Logf("paired %+v, unpaired %+v", paired, unpaired)
	if paired.Lo > 1.03 || paired.Hi < 1.03 {
		t.Errorf("paired interval [%v, %v] misses the true ratio 1.03", paired.Lo, paired.Hi)
	}
	if paired.Hi-paired.Lo >= (unpaired.Hi-unpaired.Lo)/4 {
		t.Errorf("paired interval %v wide, unpaired %v: the pairing took nothing out", paired.Hi-paired.Lo, unpaired.Hi-unpaired.Lo)
	}
	if one := PairedRatioCI(a, b, pairs[:1], 0.95); !math.IsNaN(one.Est) {
		t.Errorf("one pair: %+v, want NaN", one)
	}
}
