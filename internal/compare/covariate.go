package compare

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// LoadAdjustment says how a CPU comparison under load took the machine's
// cost of the load out of its pairs (see loadCPUKey): each pair's log
// ratio of CPU less Slope times the pair's log ratio of the load
// generator's own CPU.
//
// Why: on the 2-vCPU KVM guest where compare was measured, a server's CPU
// under a fixed load moved from window to window with a cost every process
// there paid at once (wake-ups and system calls cost more in some tens of
// seconds than in others), which pairs of windows 10 s apart did not
// cancel: a 3% change was missed in the runs whose pairs' log ratios
// spread 3-4%. The generator sends the same requests in every window, so
// its own CPU moves with that cost alone: within the sides it followed the
// server's CPU with a correlation of 0.90-0.96 (bench/compare-stats), where
// a separate pipe probe, tried first, followed it at 0.18-0.75.
//
// The slope is fitted by least squares on the windows' deviations from
// their own side's means (log CPU on log generator CPU), so the difference
// between the sides, which is what is tested, does not set it. The
// adjustment is not used where the slope is not positive, or where the
// generator's own pairs differ between the sides (signed-rank p < 0.05):
// a side that changes what the generator does (larger responses, closed
// connections) would move the adjustment with it. Both rules are applied
// again under every swap of the randomization test, so the test stays
// exact.
type LoadAdjustment struct {
	// Used is true when the test and the ratio come from the adjusted
	// pairs; Why says why not otherwise.
	Used bool   `json:"used"`
	Why  string `json:"why,omitempty"`
	// Slope is the % change of CPU per % change of the generator's CPU,
	// and Corr the correlation it was fitted with, within the sides.
	Slope float64 `json:"slope"`
	Corr  float64 `json:"correlation"`
	// Load is the generator's CPU B/A over the pairs (Hodges-Lehmann) and
	// LoadP the signed-rank p of its pairs.
	Load  float64 `json:"load_ratio"`
	LoadP float64 `json:"load_p"`
	// P is the p-value of the adjusted pairs (adjustedSwapP), and
	// Unadjusted the signed-rank p of the CPU pairs before the
	// adjustment, for comparison.
	P          float64 `json:"p"`
	Unadjusted float64 `json:"unadjusted_p"`
}

// loadMovedP is the signed-rank p of the generator's own pairs below which
// the sides are taken to have changed the generator's work.
const loadMovedP = 0.05

// adjustable reports whether m is compared net of the load's cost.
func adjustable(m Metric) bool {
	return m.Name == metricCPU.Name || m.Name == metricCPUPerK.Name
}

// loadAdjust returns the pairs' log ratios of CPU net of the generator's
// (a, b: the sides' values; ca, cb: the generator's CPU in the same
// windows), and the adjustment made; d is nil when no adjustment is used.
func loadAdjust(a, b, ca, cb []float64, pairs []Pair) (d []float64, adj *LoadAdjustment) {
	la, lb, lca, lcb := logs(a), logs(b), logs(ca), logs(cb)
	if la == nil || lb == nil || lca == nil || lcb == nil || len(pairs) < 2 {
		return nil, nil
	}
	adj = &LoadAdjustment{}
	adj.Slope, adj.Corr = withinSlope(la, lca, lb, lcb)
	if adj.Corr == 0 {
		adj.Why = "the generator's CPU or the sides' did not vary"
		return nil, adj
	}
	raw, gen := make([]float64, len(pairs)), make([]float64, len(pairs))
	for i, p := range pairs {
		raw[i] = lb[p.B] - la[p.A]
		gen[i] = lcb[p.B] - lca[p.A]
	}
	adj.LoadP = SignedRank(gen).P
	est, _, _ := hodgesLehmann(gen, 0.95)
	adj.Load = math.Exp(est)
	adj.P = adjustedSwapP(la, lb, lca, lcb, pairs)
	switch {
	case !(adj.Slope > 0):
		adj.Why = fmt.Sprintf("CPU did not rise with the generator's (slope %.2f)", adj.Slope)
		return nil, adj
	case adj.LoadP < loadMovedP:
		adj.Why = fmt.Sprintf("the sides changed the generator's own CPU (B/A %.3f, p=%.3f)", adj.Load, adj.LoadP)
		return nil, adj
	}
	d = make([]float64, len(pairs))
	for i := range d {
		d[i] = raw[i] - adj.Slope*gen[i]
	}
	adj.Used = true
	return d, adj
}

// withinSlope fits log CPU y on log generator CPU x by least squares on
// each side's deviations from its own means (ya, xa: side A's windows;
// yb, xb: B's), and gives the correlation it was fitted with (0 where
// either does not vary).
func withinSlope(ya, xa, yb, xb []float64) (slope, corr float64) {
	var sxy, sxx, syy float64
	for _, side := range [][2][]float64{{ya, xa}, {yb, xb}} {
		y, x := side[0], side[1]
		my, mx := mean(y), mean(x)
		for i := range y {
			sxy += (x[i] - mx) * (y[i] - my)
			sxx += (x[i] - mx) * (x[i] - mx)
			syy += (y[i] - my) * (y[i] - my)
		}
	}
	if sxx == 0 || syy == 0 {
		return 0, 0
	}
	return sxy / sxx, sxy / math.Sqrt(sxx*syy)
}

// adjustedSwapP is the p-value of the CPU pairs, adjusted where the rules
// allow, by randomization: with no difference between the sides, the two
// windows of each round were as likely taken in either order, so every
// pattern of swaps within pairs was as likely as the one observed. For
// each pattern the sides' windows are swapped, the slope fitted again,
// the rules of LoadAdjustment applied (raw pairs where the slope is not
// positive or the generator's pairs differ) and the signed-rank statistic
// of the pairs computed; p is the share of patterns at least as far from
// its center as the observed one. The statistic is one fixed function of
// the pattern, so the test is exact (fitting the slope once on the
// observed windows had made it slightly liberal: on simulated runs with
// no difference, 7.6% of p values at or below 0.05). All 2^n patterns up
// to 16 pairs, 20,000 drawn at random beyond (a seeded generator: the
// same windows give the same p).
func adjustedSwapP(la, lb, lca, lcb []float64, pairs []Pair) float64 {
	n := len(pairs)
	ya, yb, xa, xb := slices.Clone(la), slices.Clone(lb), slices.Clone(lca), slices.Clone(lcb)
	d, gen := make([]float64, n), make([]float64, n)
	// A swap turns the signs of the generator's pairs, never their sizes,
	// so their signed-rank p depends on the statistic alone: computed once
	// per value of it.
	genP := map[int64]float64{}
	moved := func(g []float64) bool {
		key := int64(math.Round(2 * signedRankDeviation(g)))
		p, ok := genP[key]
		if !ok {
			p = SignedRank(g).P
			genP[key] = p
		}
		return p < loadMovedP
	}
	stat := func(bits func(i int) bool) float64 {
		for i, p := range pairs {
			if bits(i) {
				ya[p.A], yb[p.B] = lb[p.B], la[p.A]
				xa[p.A], xb[p.B] = lcb[p.B], lca[p.A]
			} else {
				ya[p.A], yb[p.B] = la[p.A], lb[p.B]
				xa[p.A], xb[p.B] = lca[p.A], lcb[p.B]
			}
		}
		slope, _ := withinSlope(ya, xa, yb, xb)
		for i, p := range pairs {
			gen[i] = xb[p.B] - xa[p.A]
		}
		if !(slope > 0) || moved(gen) {
			slope = 0
		}
		for i, p := range pairs {
			d[i] = (yb[p.B] - ya[p.A]) - slope*gen[i]
		}
		return signedRankDeviation(d)
	}
	observed := stat(func(int) bool { return false })
	extreme, total := 0, 0
	const eps = 1e-9
	if n <= 16 {
		for mask := uint64(0); mask < 1<<n; mask++ {
			if stat(func(i int) bool { return mask>>i&1 == 1 }) >= observed-eps {
				extreme++
			}
			total++
		}
		return float64(extreme) / float64(total)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	flips := make([]bool, n)
	for range 20000 {
		for i := range flips {
			flips[i] = rng.IntN(2) == 1
		}
		if stat(func(i int) bool { return flips[i] }) >= observed-eps {
			extreme++
		}
		total++
	}
	// The observed pattern counts among the patterns.
	return float64(extreme+1) / float64(total+1)
}

// signedRankDeviation is |W+ - n(n+1)/4| of the differences d (zeros left
// out, ties given their mean rank): how far the signed-rank statistic is
// from its center.
func signedRankDeviation(d []float64) float64 {
	type rv struct {
		abs float64
		pos bool
	}
	var v []rv
	for _, x := range d {
		if x != 0 {
			v = append(v, rv{math.Abs(x), x > 0})
		}
	}
	slices.SortFunc(v, func(a, b rv) int { return cmp.Compare(a.abs, b.abs) })
	var wplus float64
	for i := 0; i < len(v); {
		j := i
		for j < len(v) && v[j].abs == v[i].abs {
			j++
		}
		rank := float64(i+j+1) / 2
		for k := i; k < j; k++ {
			if v[k].pos {
				wplus += rank
			}
		}
		i = j
	}
	m := float64(len(v))
	return math.Abs(wplus - m*(m+1)/4)
}

func mean(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}
