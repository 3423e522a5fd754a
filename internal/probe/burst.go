package probe

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
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

// span is one stretch a function was attached: its seconds and the
// calls counted in it.
type span struct {
	sec float64
	n   uint64
}

// scheduler runs the window's probes: the functions that fit the budget
// on one link through the window (steady), the others in bursts (hot).
// When the steady functions cost more than their share of the budget
// (their rate rose after the pre-flight, or the pre-flight caught them
// slowed by the hot ones), the dearest move to the bursts: the steady
// link is closed and one without them attached, so from then on the
// functions left on it are sampled too (the gap between the two links is
// not counted), said so like the others.
type scheduler struct {
	// attach attaches a link over the points ids; read returns every
	// point's counter (cumulative: a point is on one link at a time).
	attach func(ids []int) (*attached, error)
	read   func() ([]uint64, error)
	// cost and rate are each point's cost in ns a call and its rate in
	// calls a second from the pre-flight.
	cost, rate []float64
	// moved, when set, is told that point i moves to the bursts at rate
	// calls a second, and returns its cost a call from then on (its
	// stacks sampled more sparsely, where the pre-flight saw it idle).
	moved          func(i int, rate float64) float64
	costAdj        float64 // ns spent at costs since changed
	budgetNS       float64 // over the window
	budgetNSPerSec float64
	period         time.Duration
	start, end     time.Time

	mu         sync.Mutex
	steady     []int
	steadyLink *attached
	steadyAt   time.Time
	steadyBase []uint64 // counters when the steady link was attached
	hot        []int
	spans      map[int][]span
	replans    int
	err        error
	// burstAttach and burstClose are how long each burst took to attach
	// and to close.
	burstAttach, burstClose []time.Duration
}

func newScheduler(steady, hot []int, cost, rate []float64) *scheduler {
	return &scheduler{steady: steady, hot: hot, cost: cost, rate: rate, spans: map[int][]span{}}
}

// attachSteady puts the steady functions on a link of their own.
func (s *scheduler) attachSteady() error {
	if len(s.steady) == 0 {
		return nil
	}
	base, err := s.read()
	if err != nil {
		return err
	}
	a, err := s.attach(s.steady)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.steadyLink, s.steadyAt, s.steadyBase = a, time.Now(), base
	s.mu.Unlock()
	return nil
}

// closeSteady detaches the steady link, recording its span for each of
// its functions, and returns how long the close took.
func (s *scheduler) closeSteady() (time.Duration, error) {
	s.mu.Lock()
	a, base := s.steadyLink, s.steadyBase
	s.steadyLink = nil
	s.mu.Unlock()
	if a == nil {
		return 0, nil
	}
	t := time.Now()
	a.close() // closed, the link has run its last program
	took := time.Since(t)
	c, err := s.read()
	if err != nil {
		return took, err
	}
	s.mu.Lock()
	s.addSpans(a, t, s.steady, base, c)
	s.mu.Unlock()
	return took, nil
}

// minSpan is the shortest span kept for the estimate: a burst cut short
// by the window's end as it began holds little but its edges.
const minSpan = time.Millisecond

// addSpans records a span for each of ids, attached by a and closed at
// closed, with the calls between the counters base and c.
func (s *scheduler) addSpans(a *attached, closed time.Time, ids []int, base, c []uint64) {
	for _, i := range ids {
		if d := closed.Sub(a.since[i]); d >= minSpan {
			s.spans[i] = append(s.spans[i], span{d.Seconds(), c[i] - base[i]})
		}
	}
}

// spent is what the probes have cost the target so far (ns).
func (s *scheduler) spent() (float64, error) {
	c, err := s.read()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.costAdj
	for i, n := range c {
		ns += float64(n) * s.cost[i]
	}
	return ns, nil
}

// ratePerSec is what function i costs a second while attached (ns): from
// the calls its spans and the running steady link counted, or the
// pre-flight's rate before 20 ms and 100 calls of them.
func (s *scheduler) ratePerSec(i int, c []uint64) float64 {
	var n, sec float64
	for _, sp := range s.spans[i] {
		n, sec = n+float64(sp.n), sec+sp.sec
	}
	if s.steadyLink != nil && slices.Contains(s.steady, i) {
		n += float64(c[i] - s.steadyBase[i])
		sec += time.Since(s.steadyAt).Seconds()
	}
	if sec < 0.02 || n < 100 {
		// Too little seen to trust (a target stalled through a short
		// burst would read as free): the pre-flight's rate, or more.
		r := s.rate[i]
		if sec > 0 {
			r = max(r, n/sec)
		}
		return r * s.cost[i]
	}
	return n / sec * s.cost[i]
}

// replan moves the dearest steady functions to the bursts while the
// steady ones, at the rates they have shown, cost more than their share
// of the budget (see shareBudget). It judges after 100 ms of the steady
// link, or as soon as the link has spent a tenth of the budget (a
// function idle in the pre-flight and called a million times a second
// since spends the whole budget in tens of milliseconds).
func (s *scheduler) replan() error {
	s.mu.Lock()
	if s.steadyLink == nil {
		s.mu.Unlock()
		return nil
	}
	c, err := s.read()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if time.Since(s.steadyAt) < 100*time.Millisecond {
		var ns float64
		for _, i := range s.steady {
			ns += float64(c[i]-s.steadyBase[i]) * s.cost[i]
		}
		if ns < s.budgetNS/10 {
			s.mu.Unlock()
			return nil
		}
	}
	rates := make([]float64, len(s.cost))
	for _, i := range s.steady {
		rates[i] = s.ratePerSec(i, c) / s.cost[i]
	}
	keep, hot := shareBudget(s.steady, s.hot, rates, func(i int) float64 { return s.cost[i] }, s.budgetNSPerSec)
	s.mu.Unlock()
	if len(keep) == len(s.steady) {
		return nil
	}
	if _, err := s.closeSteady(); err != nil {
		return err
	}
	if c, err = s.read(); err != nil {
		return err
	}
	s.mu.Lock()
	for _, i := range hot {
		if slices.Contains(s.steady, i) && s.moved != nil {
			// The calls so far were dearer or cheaper: spent keeps them
			// at their cost.
			cost := s.moved(i, rates[i])
			s.costAdj += float64(c[i]) * (s.cost[i] - cost)
			s.cost[i] = cost
			s.rate[i] = rates[i]
		}
	}
	s.steady, s.hot = keep, hot
	s.replans++
	s.mu.Unlock()
	return s.attachSteady()
}

// rates returns what the steady and the hot functions cost a second while
// attached (ns).
func (s *scheduler) rates() (steady, hot float64, err error) {
	c, err := s.read()
	if err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.steady {
		steady += s.ratePerSec(i, c)
	}
	for _, i := range s.hot {
		hot += s.ratePerSec(i, c)
	}
	return steady, hot, nil
}

// run re-plans and runs bursts of the hot functions until the window's
// end or stop, an attach that fails, or a budget that affords no more
// bursts; no burst is attached when it returns (the steady link is, until
// closeSteady).
func (s *scheduler) run(stop <-chan struct{}) {
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
	fail := func(err error) {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
	for time.Until(s.end) > 0 {
		select {
		case <-stop:
			return
		default:
		}
		if err := s.replan(); err != nil {
			fail(err)
			return
		}
		spent, err := s.spent()
		if err != nil {
			fail(err)
			return
		}
		steadyNS, hotNS, err := s.rates()
		if err != nil {
			fail(err)
			return
		}
		on, off := nextBurst(burstShare*s.budgetNS-spent, time.Until(s.end), steadyNS, hotNS, s.period)
		s.mu.Lock()
		hot := slices.Clone(s.hot)
		s.mu.Unlock()
		if len(hot) == 0 || on <= 0 {
			// Nothing to burst now: look again soon (the steady
			// functions may need the bursts yet; a look reads a few
			// counters), every 2 ms while the steady link is young, as
			// a rate the pre-flight missed spends the budget fast.
			every := 10 * time.Millisecond
			s.mu.Lock()
			if s.steadyLink != nil && time.Since(s.steadyAt) < 100*time.Millisecond {
				every = 2 * time.Millisecond
			}
			s.mu.Unlock()
			if !wait(every) {
				return
			}
			continue
		}
		base, err := s.read()
		if err != nil {
			fail(err)
			return
		}
		ta := time.Now()
		a, err := s.attach(hot)
		if err != nil {
			fail(err)
			return
		}
		t0 := time.Now()
		more := wait(on)
		t1 := time.Now()
		// Closed, the link has run its last program: the counters hold
		// every call it caught.
		a.close()
		s.mu.Lock()
		s.burstAttach = append(s.burstAttach, t0.Sub(ta))
		s.burstClose = append(s.burstClose, time.Since(t1))
		s.mu.Unlock()
		c, err := s.read()
		if err != nil {
			fail(err)
			return
		}
		s.mu.Lock()
		s.addSpans(a, t1, hot, base, c)
		s.mu.Unlock()
		if !more {
			return
		}
		// The time off is counted from the close call: its wait for the
		// kernel to let go of the probes is part of it.
		if !wait(time.Until(t1.Add(off))) {
			return
		}
	}
}

// report sets each probed function's result from its spans: a function
// on the steady link through the whole window (one span) is exact; one
// with bursts, or moved to them, is an estimate scaled from its spans to
// the window of sec seconds, with the duty cycle stated (Sampling), its
// argument counts scaled the same way (call it after they are read); a
// hot function no burst reached is marked too hot. It returns the
// functions sampled.
func (s *scheduler) report(stat map[int]*FuncStat, sec, budget float64, firstSteady []int) (sampled []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, sps := range s.spans {
		st := stat[i]
		var n uint64
		var on float64
		counts, secs := make([]uint64, len(sps)), make([]float64, len(sps))
		for k, sp := range sps {
			n, on = n+sp.n, on+sp.sec
			counts[k], secs[k] = sp.n, sp.sec
		}
		if len(sps) == 1 && slices.Contains(firstSteady, i) && slices.Contains(s.steady, i) {
			st.Count = n
			if sec > 0 {
				st.PerSec = float64(n) / sec
			}
			continue
		}
		if on <= 0 || sec <= 0 {
			continue
		}
		rate, margin := burstRate(counts, secs)
		st.PerSec = rate
		st.Count = uint64(math.Round(rate * sec))
		st.Sampled = &Sampling{Duty: min(on/sec, 1), Bursts: len(sps), OnSeconds: on, Counted: n, PerSecMargin: margin}
		for a := range st.Args {
			st.Args[a].Count = uint64(math.Round(float64(st.Args[a].Count) * sec / on))
		}
		sampled = append(sampled, i)
	}
	for _, i := range s.hot {
		if len(s.spans[i]) == 0 {
			markTooHot(stat[i], s.rate[i], s.cost[i], budget, ", and no burst fitted in the window")
		}
	}
	slices.Sort(sampled)
	return sampled
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
