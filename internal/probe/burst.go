package probe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	slices.SortStableFunc(keep, func(a, b int) int { return cmpFloat(dear(a), dear(b)) })
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

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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
	slices.SortStableFunc(burst, func(a, b int) int { return cmpFloat(rates[a]*cost(a), rates[b]*cost(b)) })
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

// nextBurst returns how long the next burst may last (0: none fits) and
// how long to stay detached after it, given the budget left (ns), the
// window's remaining time, what the functions probed throughout cost a
// second (ns) and what the bursts' functions cost a second while
// attached (ns). The duty is what the budget left affords over the time
// left, so a burst that caught more calls than planned shortens the ones
// after it.
func nextBurst(leftNS float64, remaining time.Duration, keepNSPerSec, hotNSPerSec float64, period time.Duration) (on, off time.Duration) {
	if remaining < minBurst {
		return 0, 0
	}
	avail := leftNS - keepNSPerSec*remaining.Seconds()
	if hotNSPerSec <= 0 {
		return remaining, 0
	}
	afford := time.Duration(avail / hotNSPerSec * 1e9) // on-time the budget left pays for
	if afford < minBurst {
		return 0, 0
	}
	if afford >= remaining {
		return remaining, 0
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

// bursts probes the hot functions in bursts through the window, keeping
// what each burst counted.
type bursts struct {
	// attach attaches the hot functions; its detach detaches them and
	// returns the calls of each (in hot's order) counted while attached.
	attach func() (detach func() ([]uint64, error), err error)
	hot    []int
	// cost is each hot function's cost in ns a call, rate its rate from
	// the pre-flight (calls a second), until bursts measure it.
	cost, rate []float64
	// keepSpent is what the functions probed throughout have cost so
	// far (ns), keepNSPerSec what they cost a second.
	keepSpent    func() float64
	keepNSPerSec float64
	budgetNS     float64
	period       time.Duration
	end          time.Time

	mu     sync.Mutex
	on     []float64  // each burst's on-time (s)
	counts [][]uint64 // each burst's calls, in hot's order
	total  []uint64   // the calls of all bursts, in hot's order
	err    error
}

func newBursts(hot []int, cost, rate []float64) *bursts {
	return &bursts{hot: hot, cost: cost, rate: rate, total: make([]uint64, len(hot))}
}

// spent is what the bursts' calls have cost the target so far (ns).
func (b *bursts) spent() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ns float64
	for j, n := range b.total {
		ns += float64(n) * b.cost[j]
	}
	return ns
}

// hotNSPerSec is what the hot functions cost a second while attached:
// from the rates the bursts counted, or the pre-flight's before any.
func (b *bursts) hotNSPerSec() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var on float64
	for _, s := range b.on {
		on += s
	}
	var ns float64
	for j := range b.hot {
		r := b.rate[j]
		if on > 0.02 {
			r = float64(b.total[j]) / on
		}
		ns += r * b.cost[j]
	}
	return ns
}

// run attaches and detaches the hot functions until the window's end,
// stop, an attach that fails, or a budget that affords no more; nothing
// is attached when it returns.
func (b *bursts) run(stop <-chan struct{}) {
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-stop:
			return false
		case <-t.C:
			return true
		}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		left := burstShare*b.budgetNS - b.keepSpent() - b.spent()
		on, off := nextBurst(left, time.Until(b.end), b.keepNSPerSec, b.hotNSPerSec(), b.period)
		if on <= 0 {
			return
		}
		detach, err := b.attach()
		if err != nil {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			return
		}
		t0 := time.Now()
		more := wait(on)
		sec := time.Since(t0).Seconds()
		c, err := detach()
		b.mu.Lock()
		if err != nil {
			b.err = err
		} else {
			b.on = append(b.on, sec)
			b.counts = append(b.counts, c)
			for j, n := range c {
				b.total[j] += n
			}
		}
		b.mu.Unlock()
		if err != nil || !more {
			return
		}
		// The time off is counted from the close call: its wait for the
		// kernel to let go of the probes is part of it.
		if !wait(time.Until(t0.Add(time.Duration(sec*1e9) + off))) {
			return
		}
	}
}

// report sets the hot functions' results: the calls counted in the
// bursts, scaled to the window of sec seconds, with the duty cycle stated
// (Sampling); a function no burst reached is marked too hot. Its
// argument counts are scaled the same way; call it after they are read.
func (b *bursts) report(stat map[int]*FuncStat, sec float64, budget float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var on float64
	for _, s := range b.on {
		on += s
	}
	for j, i := range b.hot {
		s := stat[i]
		if len(b.on) == 0 || on <= 0 || sec <= 0 {
			markTooHot(s, b.rate[j], b.cost[j], budget, ", and the window ended before a burst")
			continue
		}
		per := make([]uint64, len(b.counts))
		for k, c := range b.counts {
			per[k] = c[j]
		}
		rate, margin := burstRate(per, b.on)
		s.PerSec = rate
		s.Count = uint64(math.Round(rate * sec))
		s.Sampled = &Sampling{Duty: min(on/sec, 1), Bursts: len(b.on), OnSeconds: on, Counted: b.total[j], PerSecMargin: margin}
		for a := range s.Args {
			s.Args[a].Count = uint64(math.Round(float64(s.Args[a].Count) * sec / on))
		}
	}
}

// burstNote says which functions were sampled in bursts and what their
// figures are.
func burstNote(stat map[int]*FuncStat, hot []int) string {
	var names []string
	var duty float64
	bursts := 0
	for _, i := range hot {
		if s := stat[i]; s.Sampled != nil {
			names = append(names, s.Func)
			duty, bursts = s.Sampled.Duty, s.Sampled.Bursts
		}
	}
	if len(names) == 0 {
		return "too hot to probe through the window, and no burst fitted in it: " + strings.Join(funcNames(stat, hot), ", ")
	}
	return fmt.Sprintf("sampled in %d bursts, attached %.1f%% of the window (too hot to probe throughout within the budget): %s; their counts are estimates scaled from the bursts, their callers and arguments the bursts'",
		bursts, 100*duty, strings.Join(names, ", "))
}

func funcNames(stat map[int]*FuncStat, ids []int) []string {
	var out []string
	for _, i := range ids {
		out = append(out, stat[i].Func)
	}
	return out
}

// atomicFloat is a float64 read and written from two goroutines.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) store(v float64) { f.bits.Store(math.Float64bits(v)) }
func (f *atomicFloat) load() float64   { return math.Float64frombits(f.bits.Load()) }
