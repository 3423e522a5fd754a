package compare

import (
	"math"
	"sort"
)

// exactSignedRankLimit is the number of nonzero differences up to which the
// signed-rank p-value is exact.
const exactSignedRankLimit = 60

// SignedRank is Wilcoxon's two-sided signed-rank test of the paired
// differences d against 0: zeros are dropped, tied |d| get mid-ranks. Stat
// is W+, the rank sum of the positive differences. The p-value is exact
// (the null distribution of W+ given the ranks, ties included, counted
// over the 2^n equally likely sign patterns by a recurrence on doubled
// ranks) up to 60 nonzero differences, the normal approximation with the
// tie correction beyond.
func SignedRank(d []float64) Test { return signedRank(d, exactSignedRankLimit) }

// signedRank is SignedRank, exact up to exactLimit nonzero differences.
func signedRank(d []float64, exactLimit int) Test {
	var nz []float64
	for _, x := range d {
		if x != 0 && !math.IsNaN(x) {
			nz = append(nz, x)
		}
	}
	n := len(nz)
	if n == 0 {
		return Test{P: 1, Exact: true}
	}
	mag := make([]float64, n)
	for i, x := range nz {
		mag[i] = math.Abs(x)
	}
	r, ties := ranks(mag, nil)
	var wPlus, total float64
	for i, x := range nz {
		total += r[i]
		if x > 0 {
			wPlus += r[i]
		}
	}
	dev := math.Abs(wPlus - total/2)
	if n <= exactLimit {
		// Doubled mid-ranks are integers; count the sign patterns by the
		// doubled sum of the positive ranks, as probabilities.
		t2 := int(math.Round(2 * total))
		dist := make([]float64, t2+1)
		dist[0] = 1
		hi := 0
		for _, x := range r {
			k := int(math.Round(2 * x))
			for s := hi; s >= 0; s-- {
				if dist[s] != 0 {
					dist[s+k] += dist[s] / 2
					dist[s] /= 2
				}
			}
			hi += k
		}
		var p float64
		for s, c := range dist {
			if math.Abs(float64(s)/2-total/2) >= dev-1e-9 {
				p += c
			}
		}
		return Test{Stat: wPlus, P: clamp01(p), Exact: true}
	}
	nf := float64(n)
	sigma := math.Sqrt(nf*(nf+1)*(2*nf+1)/24 - ties/48)
	if sigma == 0 {
		return Test{Stat: wPlus, P: 1}
	}
	z := (dev - 0.5) / sigma
	return Test{Stat: wPlus, P: clamp01(2 * normCDF(-max(z, 0)))}
}

// Pair indexes one window of each sample taken in the same round of the
// randomized schedule: a[A] and b[B].
type Pair struct{ A, B int }

// PairedSignedRank is Wilcoxon's signed-rank test of the pairs' log
// ratios log(b/a) (their differences b-a when a value is not positive):
// the test of the randomized block design, where under no difference the
// two windows of a round were equally likely taken in either order. Fewer
// than 2 pairs: NaN.
func PairedSignedRank(a, b []float64, pairs []Pair) Test {
	if len(pairs) < 2 {
		return Test{P: math.NaN()}
	}
	pa, pb := make([]float64, len(pairs)), make([]float64, len(pairs))
	for i, pr := range pairs {
		pa[i], pb[i] = a[pr.A], b[pr.B]
	}
	if la, lb := logs(pa), logs(pb); la != nil && lb != nil {
		pa, pb = la, lb
	}
	d := make([]float64, len(pairs))
	for i := range d {
		d[i] = pb[i] - pa[i]
	}
	return SignedRank(d)
}

// PairedRatioCI estimates B/A from the pairs with a confidence interval at
// level conf, the estimate that belongs to PairedSignedRank: the
// exponential of the Hodges-Lehmann estimate of the pairs' log ratios (the
// median of their n(n+1)/2 Walsh averages (d_i+d_j)/2, i <= j) with the
// distribution-free interval between the Walsh averages ranked k and
// N+1-k, k from the exact signed-rank null distribution, as R's
// wilcox.test(paired = TRUE, conf.int = TRUE) computes it. Where the
// pairing takes out what moves between rounds, this interval is narrower
// than RatioCI's over all n*m cross differences, which keep that movement.
// A value that is not positive makes it the shift of the differences
// relative to A's median. Fewer than 2 pairs: NaN.
func PairedRatioCI(a, b []float64, pairs []Pair, conf float64) Ratio {
	none := Ratio{Est: math.NaN(), Lo: math.NaN(), Hi: math.NaN(), Method: "none"}
	n := len(pairs)
	if n < 2 {
		return none
	}
	pa, pb := make([]float64, n), make([]float64, n)
	for i, pr := range pairs {
		pa[i], pb[i] = a[pr.A], b[pr.B]
	}
	scale := 1.0
	la, lb := logs(pa), logs(pb)
	useLog := la != nil && lb != nil
	if useLog {
		pa, pb = la, lb
	} else if scale = median(sorted(pa)); scale == 0 {
		return none
	}
	d := make([]float64, n)
	for i := range d {
		d[i] = pb[i] - pa[i]
	}
	est, lo, hi := hodgesLehmann(d, conf)
	if useLog {
		return Ratio{Est: math.Exp(est), Lo: math.Exp(lo), Hi: math.Exp(hi), Method: "hodges-lehmann-paired-log"}
	}
	return Ratio{Est: 1 + est/scale, Lo: 1 + lo/scale, Hi: 1 + hi/scale, Method: "hodges-lehmann-paired-shift"}
}

// hodgesLehmann is the Hodges-Lehmann estimate of the center of the
// differences d (the median of their n(n+1)/2 Walsh averages) with the
// distribution-free interval at level conf between the Walsh averages
// ranked k and N+1-k, k from the exact signed-rank null distribution.
func hodgesLehmann(d []float64, conf float64) (est, lo, hi float64) {
	n := len(d)
	walsh := make([]float64, 0, n*(n+1)/2)
	for i := range n {
		for j := i; j < n; j++ {
			walsh = append(walsh, (d[i]+d[j])/2)
		}
	}
	sort.Float64s(walsh)
	k := signedRankRank(n, conf) // 1-based
	return median(walsh), walsh[k-1], walsh[len(walsh)-k]
}

// signedRankRank returns k (1-based, at least 1) such that the k-th
// smallest and k-th largest of the n(n+1)/2 Walsh averages bound a conf
// interval: R's qsignrank((1-conf)/2, n), the smallest w with
// P(W+ <= w) >= (1-conf)/2, counted exactly over the 2^n sign patterns
// (ranks 1..n, no ties) up to 60 pairs, by the normal approximation
// beyond.
func signedRankRank(n int, conf float64) int {
	tail := (1 - conf) / 2
	total := n * (n + 1) / 2
	if n > exactSignedRankLimit {
		nf := float64(n)
		z := normQuantile(1 - tail)
		k := int(math.Floor(float64(total)/2 - z*math.Sqrt(nf*(nf+1)*(2*nf+1)/24)))
		return max(k, 1)
	}
	dist := make([]float64, total+1)
	dist[0] = 1
	for r := 1; r <= n; r++ {
		for s := total; s >= r; s-- {
			dist[s] = (dist[s] + dist[s-r]) / 2
		}
		for s := r - 1; s >= 0; s-- {
			dist[s] /= 2
		}
	}
	var cum float64
	for w, p := range dist {
		cum += p
		if cum >= tail-1e-12 {
			return max(w, 1)
		}
	}
	return 1
}

// minSignedRankP is the smallest two-sided p-value the exact signed-rank
// test can give with n nonzero differences: the two patterns of one sign,
// 2/2^n.
func minSignedRankP(n int) float64 { return 2 / math.Exp2(float64(n)) }
