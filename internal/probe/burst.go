package probe

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Bursts. A function whose calls would cost the target more than the
// budget if probed through the whole window is probed in bursts instead:
// attached for a while, detached, attached again later, so that the calls
// the bursts catch cost no more than the budget. Detaching is the only way
// to stop the cost: a disabled perf event or a BPF program that returns at
// once still leaves the int3 in the target, and every call still traps
// (docs/probe.md). The calls counted in a burst are exact for its span;
// the window's count is scaled from them, and said to be an estimate.

const (
	// burstShare is the share of the budget the bursts plan to spend; the
	// rest absorbs a rate that rises after the bursts measured it.
	burstShare = 0.9
	// minBurst is the shortest burst: a uprobe_multi link is attached in
	// about 15 ms and removed at the start of its close, so a shorter one
	// would measure little but its own edges.
	minBurst = 5 * time.Millisecond
	// minBursts is the fewest bursts a function must fit in the window to
	// be probed at all.
	minBursts = 2
	// BurstEdge bounds, at each burst, the time the probe may be attached
	// outside the span counted as its on-time (from the attach call's
	// return to the close call): the kernel installs the breakpoints at
	// the end of the attach and removes them at the start of the close.
	BurstEdge = time.Millisecond
)

// burstPeriod is the time from one burst's start to the next at the
// planned duty: a tenth of the window, from 100 ms to 1 s, so that bursts
// are spread over the whole window.
func burstPeriod(window time.Duration) time.Duration {
	return min(max(window/10, 100*time.Millisecond), time.Second)
}

// shareBudget moves functions from those probed throughout (keep) to the
// bursts (hot), dearest first, while together they would cost more than
// their share of the budget (ns a second): all that the bursts would
// plan to spend (burstShare) while no function needs bursts, half of it
// once some do, so that the bursts keep the other half. Without it one
// function just under the budget would take all of it and end the window
// early, and the bursts would get nothing. Both lists come back in index
// order.
func shareBudget(keep, hot []int, rates []float64, cost func(int) float64, budgetNSPerSec float64) ([]int, []int) {
	keep, hot = slices.Clone(keep), slices.Clone(hot)
	dear := func(i int) float64 { return rates[i] * cost(i) }
	slices.SortStableFunc(keep, func(a, b int) int { return cmp.Compare(dear(a), dear(b)) })
	for len(keep) > 0 {
		limit := burstShare * budgetNSPerSec
		if len(hot) > 0 {
			limit /= 2
		}
		var ns float64
		for _, i := range keep {
			ns += dear(i)
		}
		if ns <= limit {
			break
		}
		hot = append(hot, keep[len(keep)-1])
		keep = keep[:len(keep)-1]
	}
	slices.Sort(keep)
	slices.Sort(hot)
	return keep, hot
}

// planBursts decides which of the hot functions (indices, with their
// rates in calls a second and cost(i) in ns a call) are probed in bursts:
// all of them together while the budget (budgetNS over the window, less
// what the functions probed throughout cost, keepNSPerSec) affords
// minBursts bursts of minBurst; else the hottest are refused, one at a
// time. Both lists are in index order.
func planBursts(hot []int, rates []float64, cost func(int) float64, budgetNS, keepNSPerSec float64, window time.Duration) (burst, refused []int) {
	burst = slices.Clone(hot)
	// Hottest (dearest a second) last, to be refused first.
	slices.SortStableFunc(burst, func(a, b int) int { return cmp.Compare(rates[a]*cost(a), rates[b]*cost(b)) })
	avail := burstShare*budgetNS - keepNSPerSec*window.Seconds()
	for len(burst) > 0 {
		var ns float64
		for _, i := range burst {
			ns += rates[i] * cost(i)
		}
		if ns <= 0 || avail/ns >= (minBursts*minBurst).Seconds() {
			break
		}
		refused = append(refused, burst[len(burst)-1])
		burst = burst[:len(burst)-1]
	}
	slices.Sort(burst)
	slices.Sort(refused)
	return burst, refused
}

// nextBurst returns how long the next burst may last (0: none fits; never
// longer than a period, so that each burst measures the rate the next one
// is planned with) and how long to stay detached after it, given the
// budget left (ns), the window's remaining time, what the functions
// probed throughout cost a second (ns) and what the bursts' functions
// cost a second while attached (ns). The duty is what the budget left
// affords over the time left, so a burst that caught more calls than
// planned shortens the ones after it.
func nextBurst(leftNS float64, remaining time.Duration, keepNSPerSec, hotNSPerSec float64, period time.Duration) (on, off time.Duration) {
	if remaining < minBurst {
		return 0, 0
	}
	avail := leftNS - keepNSPerSec*remaining.Seconds()
	if hotNSPerSec <= 0 {
		return min(period, remaining), 0
	}
	afford := time.Duration(avail / hotNSPerSec * 1e9) // on-time the budget left pays for
	if afford < minBurst {
		return 0, 0
	}
	if afford >= remaining {
		// The budget pays for the rest, at the rate measured: one period
		// at a time, so that a rate that rises is seen.
		return min(period, remaining), 0
	}
	duty := float64(afford) / float64(remaining)
	on = min(max(time.Duration(duty*float64(period)), minBurst), afford)
	off = time.Duration(float64(on) * (1 - duty) / duty)
	return on, off
}

// burstRate returns the calls a second over bursts of on[k] seconds that
// counted counts[k] calls, and the margin of that rate: three standard
// errors of the bursts' mean rate (each burst weighed by its length; from
// the spread of their rates with three bursts or more, else from the
// count's Poisson error), plus the calls the burst edges (BurstEdge each
// side) could have added or missed.
func burstRate(counts []uint64, on []float64) (rate, margin float64) {
	var n, sec float64
	for k := range counts {
		n += float64(counts[k])
		sec += on[k]
	}
	if sec <= 0 {
		return 0, 0
	}
	rate = n / sec
	var se float64
	if len(counts) >= 3 {
		var ss float64
		for k := range counts {
			if on[k] > 0 {
				d := float64(counts[k])/on[k] - rate
				ss += on[k] * d * d
			}
		}
		se = math.Sqrt(ss / float64(len(counts)-1) / sec)
	}
	se = max(se, math.Sqrt(n)/sec)
	edges := rate * 2 * BurstEdge.Seconds() * float64(len(counts)) / sec
	return rate, 3*se + edges
}

// burstNote says which functions were sampled in bursts, how, and what
// their figures are.
func burstNote(stat map[int]*FuncStat, sampled []int, replans int) string {
	var names []string
	for _, i := range sampled {
		sp := stat[i].Sampled
		names = append(names, fmt.Sprintf("%s (%s, attached %.1f%% of the window)", stat[i].Func, sp.BurstsText(), 100*sp.Duty))
	}
	moved := ""
	if replans > 0 {
		moved = "; functions probed throughout cost more than the pre-flight measured, and the dearest were moved to the bursts"
	}
	return fmt.Sprintf("sampled in bursts, too hot to probe throughout within the budget: %s%s; their counts are estimates scaled from the bursts, their callers and arguments the bursts'",
		strings.Join(names, ", "), moved)
}

// medianMS is the median of ds in milliseconds.
func medianMS(ds []time.Duration) float64 {
	s := slices.Sorted(slices.Values(ds))
	return float64(s[len(s)/2].Microseconds()) / 1e3
}

// BurstsText is "1 burst" or "N bursts".
func (sp *Sampling) BurstsText() string {
	if sp.Bursts == 1 {
		return "1 burst"
	}
	return fmt.Sprintf("%d bursts", sp.Bursts)
}
