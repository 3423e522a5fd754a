package compare

import (
	"math"
	"slices"
	"sort"
)

// The statistics of a comparison, written here from the textbook
// definitions (Conover, Practical Nonparametric Statistics, 3rd ed.;
// Hollander & Wolfe, Nonparametric Statistical Methods) so that each
// p-value and interval is the one R's wilcox.test and ks.test give on the
// same data. Every function is pure and works on copies of its inputs.

// Summary is one side's figure for one metric: the median of its windows and
// a confidence interval of the median from order statistics, which needs no
// assumption about the distribution. With fewer than 6 windows no interval
// reaches 95% and Lo, Hi are the sample's extremes with CIOK false.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Lo     float64 `json:"ci_lo"`
	Hi     float64 `json:"ci_hi"`
	// Coverage is the interval's exact coverage (at least the confidence
	// asked, since order statistics move in steps).
	Coverage float64 `json:"ci_coverage"`
	CIOK     bool    `json:"ci_ok"`
}

// Summarize returns the median of x and its order-statistic confidence
// interval at level conf (0.95): [x(k), x(n-k+1)] with the largest k such
// that P(Binomial(n, 1/2) < k) <= (1-conf)/2.
func Summarize(x []float64, conf float64) Summary {
	s := Summary{N: len(x), Median: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	if len(x) == 0 {
		return s
	}
	v := sorted(x)
	n := len(v)
	s.Median = median(v)
	s.Lo, s.Hi = v[0], v[n-1]
	tail := (1 - conf) / 2
	k := 0
	cum := 0.0 // P(B <= k-1) after the loop body for k
	for j := 0; j < n/2; j++ {
		next := cum + binomPMF(n, j)
		if next > tail {
			break
		}
		cum = next
		k = j + 1
	}
	if k > 0 {
		s.Lo, s.Hi = v[k-1], v[n-k]
		s.Coverage = 1 - 2*cum
		s.CIOK = true
	}
	return s
}

// binomPMF is P(Binomial(n, 1/2) = k).
func binomPMF(n, k int) float64 {
	return math.Exp(lchoose(n, k) - float64(n)*math.Ln2)
}

func lchoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

func sorted(x []float64) []float64 {
	v := slices.Clone(x)
	sort.Float64s(v)
	return v
}

// median of sorted v.
func median(v []float64) float64 {
	n := len(v)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// Test is the outcome of a two-sample test.
type Test struct {
	// Stat is the statistic: U (pairs with a > b, ties counting 1/2) for
	// Mann-Whitney, D for Kolmogorov-Smirnov, t for Welch.
	Stat float64 `json:"stat"`
	P    float64 `json:"p"`
	// Exact is true when P comes from the exact null distribution, false
	// for the normal or asymptotic approximation.
	Exact bool `json:"exact"`
}

// ranks returns the mid-ranks (1-based) of a then b in the pooled sample,
// and the tie term sum(t^3 - t) over groups of equal values.
func ranks(a, b []float64) (ra []float64, ties float64) {
	type obs struct {
		v     float64
		fromA bool
		i     int
	}
	all := make([]obs, 0, len(a)+len(b))
	for i, v := range a {
		all = append(all, obs{v, true, i})
	}
	for i, v := range b {
		all = append(all, obs{v, false, i})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].v < all[j].v })
	ra = make([]float64, len(a))
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		r := float64(i+j+1) / 2 // mean of ranks i+1..j
		if t := float64(j - i); t > 1 {
			ties += t*t*t - t
		}
		for k := i; k < j; k++ {
			if all[k].fromA {
				ra[all[k].i] = r
			}
		}
		i = j
	}
	return ra, ties
}

// exactMWULimit is the sample size below which (on both sides, with no
// ties) the Mann-Whitney p-value is exact, as in R's wilcox.test.
const exactMWULimit = 50

// MannWhitney is the two-sided Mann-Whitney U (Wilcoxon rank-sum) test of
// a against b. Like R's wilcox.test: exact when both samples have fewer
// than 50 values and there are no ties, otherwise the normal approximation
// with the tie correction of the variance and a continuity correction.
func MannWhitney(a, b []float64) Test {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return Test{P: math.NaN()}
	}
	ra, ties := ranks(a, b)
	var sum float64
	for _, r := range ra {
		sum += r
	}
	u := sum - float64(n*(n+1))/2
	if n < exactMWULimit && m < exactMWULimit && ties == 0 {
		dist := uDist(n, m)
		k := int(math.Round(u))
		var le, ge float64
		for i, c := range dist {
			if i <= k {
				le += c
			}
			if i >= k {
				ge += c
			}
		}
		p := min(1, 2*min(le, ge))
		return Test{Stat: u, P: p, Exact: true}
	}
	nm := float64(n * m)
	N := float64(n + m)
	z := u - nm/2
	sigma := math.Sqrt(nm / 12 * ((N + 1) - ties/(N*(N-1))))
	if sigma == 0 {
		return Test{Stat: u, P: 1}
	}
	corr := 0.5
	switch {
	case z < 0:
		corr = -0.5
	case z == 0:
		corr = 0
	}
	z = (z - corr) / sigma
	p := 2 * min(normCDF(z), normCDF(-z))
	return Test{Stat: u, P: min(1, p)}
}

// uDist returns the null distribution of U for sample sizes n and m as
// probabilities indexed by U (0..n*m), from the recurrence on the count of
// arrangements f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u).
func uDist(n, m int) []float64 {
	// f[i][j] is the distribution for sizes i and j; built row by row.
	prev := make([][]float64, m+1) // i-1
	for j := 0; j <= m; j++ {
		prev[j] = []float64{1} // i = 0: U is 0
	}
	for i := 1; i <= n; i++ {
		cur := make([][]float64, m+1)
		cur[0] = []float64{1}
		for j := 1; j <= m; j++ {
			d := make([]float64, i*j+1)
			// The largest value is from the first sample (it beats all j
			// values of the second): f(i-1, j, u-j); or from the second:
			// f(i, j-1, u).
			for u, c := range prev[j] {
				d[u+j] += c
			}
			for u, c := range cur[j-1] {
				d[u] += c
			}
			cur[j] = d
		}
		prev = cur
	}
	d := prev[m]
	var total float64
	for _, c := range d {
		total += c
	}
	for i := range d {
		d[i] /= total
	}
	return d
}

// minMWUP is the smallest two-sided p-value the exact Mann-Whitney test can
// give with samples of n and m: 2 / C(n+m, n).
func minMWUP(n, m int) float64 {
	if n == 0 || m == 0 {
		return 1
	}
	return min(1, 2*math.Exp(-lchoose(n+m, n)))
}

// KolmogorovSmirnov is the two-sided two-sample Kolmogorov-Smirnov test:
// D is the largest gap between the samples' empirical distribution
// functions. The p-value is exact, P(D >= d) under the permutation
// distribution given the pattern of ties (as R 4.2's psmirnov computes it,
// by walking the lattice of paths and looking at D only where the pooled
// values change), for n*m up to 10,000; beyond, Kolmogorov's limiting
// distribution with n*m/(n+m) as the sample size.
func KolmogorovSmirnov(a, b []float64) Test {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return Test{P: math.NaN()}
	}
	va, vb := sorted(a), sorted(b)
	// Walk the pooled sample; at each end of a group of equal values,
	// |i*m - j*n| is D scaled by n*m. check marks those positions.
	check := make([]bool, n+m+1)
	var dnm int
	i, j := 0, 0
	for i < n || j < m {
		var v float64
		switch {
		case j >= m || (i < n && va[i] <= vb[j]):
			v = va[i]
		default:
			v = vb[j]
		}
		for i < n && va[i] == v {
			i++
		}
		for j < m && vb[j] == v {
			j++
		}
		check[i+j] = true
		dnm = max(dnm, abs(i*m-j*n))
	}
	d := float64(dnm) / float64(n*m)
	if n*m > 10000 {
		x := d * math.Sqrt(float64(n*m)/float64(n+m))
		return Test{Stat: d, P: kolmogorovQ(x)}
	}
	// P(max |i*m - j*n| over checked points < dnm), by the probability of
	// each lattice point under a uniformly random path from (0,0) to
	// (n,m); paths that reach a checked point with gap >= dnm are cut.
	row := make([]float64, m+1)
	for i := 0; i <= n; i++ {
		for j := 0; j <= m; j++ {
			var p float64
			switch {
			case i == 0 && j == 0:
				p = 1
			default:
				if i > 0 {
					// From (i-1, j) by a step of the first sample.
					p += row[j] * float64(n-i+1) / float64(n+m-(i-1)-j)
				}
				if j > 0 {
					p += row[j-1] * float64(m-j+1) / float64(n+m-i-(j-1))
				}
			}
			if check[i+j] && abs(i*m-j*n) >= dnm {
				p = 0
			}
			row[j] = p
		}
		// row now holds i; the next iteration reads it as i-1 for the
		// "from (i-1, j)" term before overwriting j.
	}
	// row[m] is P(the path never reaches the observed gap at a checked
	// point); the endpoint (n, m) has gap 0 and is never cut unless dnm 0.
	p := 1 - row[m]
	if dnm == 0 {
		p = 1
	}
	return Test{Stat: d, P: clamp01(p), Exact: true}
}

// kolmogorovQ is P(K > x) for Kolmogorov's limiting distribution.
func kolmogorovQ(x float64) float64 {
	if x <= 0 {
		return 1
	}
	if x < 0.2 {
		return 1
	}
	var s float64
	for k := 1; k <= 100; k++ {
		t := 2 * math.Exp(-2*float64(k*k)*x*x)
		if k%2 == 0 {
			t = -t
		}
		s += t
		if math.Abs(t) < 1e-16 {
			break
		}
	}
	return clamp01(s)
}

// minKSP is the smallest p-value the exact two-sided KS test can give with
// samples of n and m (complete separation): 2 / C(n+m, n) as for U.
func minKSP(n, m int) float64 { return minMWUP(n, m) }

// WelchLog is Welch's two-sided t-test on the logarithms of a and b (all
// positive): used only where the samples are too small for the rank tests
// to reach significance at all (3 windows a side can give no p below 0.1),
// and said so in the report. It returns NaN when a value is not positive or
// a side has fewer than 2 values.
func WelchLog(a, b []float64) Test {
	la, lb, ok := logs(a), logs(b), true
	if la == nil || lb == nil || len(la) < 2 || len(lb) < 2 {
		ok = false
	}
	if !ok {
		return Test{P: math.NaN()}
	}
	ma, va := meanVar(la)
	mb, vb := meanVar(lb)
	sa, sb := va/float64(len(la)), vb/float64(len(lb))
	se := math.Sqrt(sa + sb)
	if se == 0 {
		if ma == mb {
			return Test{P: 1}
		}
		return Test{Stat: math.Inf(1), P: 0}
	}
	t := (mb - ma) / se
	df := (sa + sb) * (sa + sb) / (sa*sa/float64(len(la)-1) + sb*sb/float64(len(lb)-1))
	p := 2 * studentTail(math.Abs(t), df)
	return Test{Stat: t, P: clamp01(p)}
}

// WelchRatioCI estimates B/A as the exponential of the difference of the
// mean logarithms, with Welch's interval at level conf: the interval of the
// test WelchLog, so that where Welch's test stands in for the rank tests
// the verdict's estimate and interval agree with its p-value (the rank
// interval of RatioCI could include 1 where Welch's p was below the
// level). NaN when WelchLog would be.
func WelchRatioCI(a, b []float64, conf float64) Ratio {
	la, lb := logs(a), logs(b)
	if la == nil || lb == nil || len(la) < 2 || len(lb) < 2 {
		return Ratio{Est: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), Method: "none"}
	}
	ma, va := meanVar(la)
	mb, vb := meanVar(lb)
	sa, sb := va/float64(len(la)), vb/float64(len(lb))
	d := mb - ma
	h := 0.0
	if se := math.Sqrt(sa + sb); se > 0 {
		df := (sa + sb) * (sa + sb) / (sa*sa/float64(len(la)-1) + sb*sb/float64(len(lb)-1))
		h = studentQuantile((1-conf)/2, df) * se
	}
	return Ratio{Est: math.Exp(d), Lo: math.Exp(d - h), Hi: math.Exp(d + h), Method: "welch-log"}
}

// studentQuantile returns t with P(T > t) = tail for Student's t with df
// degrees of freedom (0 < tail < 0.5), by bisection on studentTail.
func studentQuantile(tail, df float64) float64 {
	lo, hi := 0.0, 1.0
	for studentTail(hi, df) > tail && hi < 1e6 {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if studentTail(mid, df) > tail {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*hi {
			break
		}
	}
	return (lo + hi) / 2
}

func logs(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		if !(v > 0) || math.IsInf(v, 0) {
			return nil
		}
		out[i] = math.Log(v)
	}
	return out
}

func meanVar(x []float64) (mean, variance float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		variance += (v - mean) * (v - mean)
	}
	return mean, variance / float64(len(x)-1)
}

// studentTail is P(T > t) for Student's t with df degrees of freedom (t >=
// 0): I_{df/(df+t^2)}(df/2, 1/2) / 2.
func studentTail(t, df float64) float64 {
	return regIncBeta(df/(df+t*t), df/2, 0.5) / 2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), by its
// continued fraction (evaluated with the modified Lentz method), using the
// symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where the fraction converges slowly.
func regIncBeta(x, a, b float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log1p(-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaFraction(1-x, b, a)/b
	}
	return front * betaFraction(x, a, b) / a
}

// betaFraction evaluates the continued fraction of I_x(a, b):
// 1/(1+ d1/(1+ d2/(1+ ...))) with d_{2k+1} = -(a+k)(a+b+k)x/((a+2k)(a+2k+1))
// and d_{2k} = k(b-k)x/((a+2k-1)(a+2k)).
func betaFraction(x, a, b float64) float64 {
	const tiny = 1e-300
	f, c, d := tiny, tiny, 0.0
	for i := 0; i <= 400; i++ {
		var num float64
		switch {
		case i == 0:
			num = 1
		case i%2 == 0:
			k := float64(i / 2)
			num = k * (b - k) * x / ((a + 2*k - 1) * (a + 2*k))
		default:
			k := float64(i / 2)
			num = -(a + k) * (a + b + k) * x / ((a + 2*k) * (a + 2*k + 1))
		}
		d = 1 + num*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		d = 1 / d
		c = 1 + num/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		cd := c * d
		f *= cd
		if math.Abs(cd-1) < 1e-15 {
			break
		}
	}
	return f
}

// Holm adjusts p-values for multiple comparisons by Holm's step-down
// method (R's p.adjust(p, "holm")): with the p-values in increasing order,
// the i-th (from 1) is multiplied by m-i+1, and each is kept at least as
// large as the one before. A NaN p-value (a metric not tested) is left
// NaN and not counted in m.
func Holm(p []float64) []float64 {
	w := make([]float64, len(p))
	for i := range w {
		w[i] = 1
	}
	return WeightedHolm(p, w)
}

// WeightedHolm adjusts p-values by Holm's weighted step-down method (Holm
// 1979): hypothesis i gets the share w[i] of the significance level, the
// hypotheses are taken in increasing order of p/w, and the k-th is
// rejected at level alpha when p/w times the weights of those not yet
// rejected (itself included) is at most alpha. The family-wise error rate
// stays at most alpha whatever the weights, as long as they are fixed
// before the data is seen; equal weights give Holm. Weights are
// normalised over the tested hypotheses; a NaN p-value is left NaN and its
// weight is not counted. A zero weight never rejects.
func WeightedHolm(p, w []float64) []float64 {
	type iq struct {
		i    int
		q, w float64
	}
	var v []iq
	total := 0.0
	for i, x := range p {
		if math.IsNaN(x) {
			continue
		}
		q := math.Inf(1)
		if w[i] > 0 {
			q = x / w[i]
		}
		v = append(v, iq{i, q, w[i]})
		total += w[i]
	}
	sort.SliceStable(v, func(a, b int) bool { return v[a].q < v[b].q })
	out := make([]float64, len(p))
	for i := range out {
		out[i] = math.NaN()
	}
	left := total
	running := 0.0
	for _, e := range v {
		adj := 1.0
		if !math.IsInf(e.q, 1) && total > 0 {
			adj = min(1, e.q*left)
		}
		running = max(running, adj)
		out[e.i] = running
		left -= e.w
	}
	return out
}

// Ratio is the estimated ratio B/A of a metric with its confidence interval.
type Ratio struct {
	Est float64 `json:"est"`
	Lo  float64 `json:"lo"`
	Hi  float64 `json:"hi"`
	// Method is "hodges-lehmann-log" (the Hodges-Lehmann shift of the
	// logarithms, all values positive), "hodges-lehmann-shift" (the shift
	// of the raw values divided by A's median, when some value is 0),
	// "hodges-lehmann-paired-log" (PairedRatioCI), "welch-log"
	// (WelchRatioCI) or "none" (A's median is 0: no ratio).
	Method string `json:"method"`
}

// RatioCI estimates B/A with a confidence interval at level conf. When all
// values are positive it is the exponential of the Hodges-Lehmann
// estimate of the shift between log(b) and log(a) (the median of all n*m
// differences log b_j - log a_i) with the distribution-free interval
// between the differences ranked k and n*m+1-k, k from the Mann-Whitney
// null distribution (exact below 50 a side, else its normal
// approximation), as R's wilcox.test(conf.int = TRUE) computes it for the
// exact case.
func RatioCI(a, b []float64, conf float64) Ratio {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return Ratio{Est: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), Method: "none"}
	}
	la, lb := logs(a), logs(b)
	useLog := la != nil && lb != nil
	scale := 1.0
	if !useLog {
		la, lb = a, b
		scale = median(sorted(a))
		if scale == 0 {
			return Ratio{Est: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), Method: "none"}
		}
	}
	est, lo, hi := hlShift(la, lb, conf)
	if useLog {
		return Ratio{Est: math.Exp(est), Lo: math.Exp(lo), Hi: math.Exp(hi), Method: "hodges-lehmann-log"}
	}
	return Ratio{Est: 1 + est/scale, Lo: 1 + lo/scale, Hi: 1 + hi/scale, Method: "hodges-lehmann-shift"}
}

// Shift is B - A in the metric's own unit with its confidence interval:
// the Hodges-Lehmann estimate of the shift and its distribution-free
// interval (ShiftCI).
type Shift struct {
	Est float64 `json:"est"`
	Lo  float64 `json:"lo"`
	Hi  float64 `json:"hi"`
}

// ShiftCI estimates B - A with a confidence interval at level conf, the
// way RatioCI does for the raw values. It stands in for the ratio where
// A's median is 0 (a syscall one side never makes), which no ratio can
// express. Either sample empty: NaN.
func ShiftCI(a, b []float64, conf float64) Shift {
	if len(a) == 0 || len(b) == 0 {
		return Shift{Est: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	}
	est, lo, hi := hlShift(a, b, conf)
	return Shift{Est: est, Lo: lo, Hi: hi}
}

// hlShift is the Hodges-Lehmann estimate of the shift from a to b (the
// median of all n*m differences b_j - a_i) and the interval between the
// differences ranked k and n*m+1-k, k from hlRank. Both non-empty.
func hlShift(a, b []float64, conf float64) (est, lo, hi float64) {
	n, m := len(a), len(b)
	diffs := make([]float64, 0, n*m)
	for _, y := range b {
		for _, x := range a {
			diffs = append(diffs, y-x)
		}
	}
	sort.Float64s(diffs)
	k := hlRank(n, m, conf) // 1-based: the interval is diffs[k-1], diffs[nm-k]
	return median(diffs), diffs[k-1], diffs[n*m-k]
}

// hlRank returns k (1-based, at least 1) such that the k-th smallest and
// k-th largest of the n*m differences bound a conf interval: R's qu =
// qwilcox((1-conf)/2, n, m), the smallest u with P(U <= u) >= (1-conf)/2.
func hlRank(n, m int, conf float64) int {
	tail := (1 - conf) / 2
	if n < exactMWULimit && m < exactMWULimit {
		var cum float64
		for u, p := range uDist(n, m) {
			cum += p
			if cum >= tail-1e-12 {
				return max(u, 1)
			}
		}
		return 1
	}
	nm := float64(n * m)
	z := normQuantile(1 - tail)
	k := int(math.Floor(nm/2 - z*math.Sqrt(nm*float64(n+m+1)/12)))
	return max(k, 1)
}

// normCDF is the standard normal distribution function.
func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// normQuantile is the inverse of normCDF.
func normQuantile(p float64) float64 { return -math.Sqrt2 * math.Erfcinv(2*p) }

func clamp01(p float64) float64 { return max(0, min(1, p)) }

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
