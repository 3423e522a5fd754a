package probe

import (
	"math"
	"slices"
	"sync"
	"time"
)

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
	budgetNS       float64 // over the window
	budgetNSPerSec float64
	period         time.Duration
	start, end     time.Time

	mu         sync.Mutex
	costAdj    float64 // ns spent at costs since changed
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
