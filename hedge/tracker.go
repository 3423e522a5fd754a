package hedge

import (
	"sync"
	"time"
)

// outcome classifies how an attempt ended.
type outcome uint8

const (
	outcomeOK         outcome = iota // an answer the caller can use
	outcomeError                     // a transport error or a 5xx other than 503
	outcomeRejected                  // 429 or 503: the server is shedding load
	outcomeSuperseded                // cancelled because another attempt won
	outcomeAbandoned                 // the caller's context ended first
)

// tracker holds the latency windows behind the adaptive delay and the
// overload switch. Latencies go into two rotating histograms (the current
// window and the one before it); the delay is a quantile of both, refreshed
// at most every refreshEvery. The switch compares the median of the
// current window with a slow average of the medians of past windows, and
// counts the primaries' errors and rejections over both windows.
type tracker struct {
	mu sync.Mutex

	cur, prev     histogram
	curStart      time.Time
	curPrimaries  windowCounts
	prevPrimaries windowCounts
	curPrimaryLat histogram // primaries only, for the median shift
	lastRefresh   time.Time

	baseline     time.Duration // slow average of past windows' primary medians
	shiftedSince time.Time     // zero when the latency is not shifted

	cfg *config

	state trackerState // as of the last refresh
}

// trackerState is what a refresh publishes.
type trackerState struct {
	delay      time.Duration
	overloaded bool
	cause      Reason // why, when overloaded
}

type windowCounts struct {
	total, errors, rejected uint64
}

// windowing sets how latency windows rotate; tests shrink it.
type windowing struct {
	refreshEvery time.Duration // how often the delay and switch are recomputed
	minAge       time.Duration // a window closes once this old and minCount full...
	minCount     uint64
	maxAge       time.Duration // ...or once this old

	probeInterval time.Duration // least time between win-rate probes, at level 1
}

var defaultWindowing = windowing{
	refreshEvery: 50 * time.Millisecond,
	minAge:       time.Second,
	minCount:     200,
	maxAge:       10 * time.Second,

	probeInterval: defaultProbeInterval,
}

const (
	warmCount     = 32  // samples before the adaptive delay is trusted
	shiftMinCount = 20  // primaries in the current window before a shift is judged
	rateMinCount  = 20  // primaries before error and rejection rates are judged
	baselineAlpha = 0.2 // weight of a new window in the baseline
)

func newTracker(cfg *config, now time.Time) *tracker {
	return &tracker{cfg: cfg, curStart: now, lastRefresh: now, state: trackerState{delay: cfg.initialDelay()}}
}

// record adds one attempt's latency. primary tells whether it was the
// first attempt of its call; only primaries feed the overload switch. When
// the record triggered a refresh it returns the new state and true.
func (t *tracker) record(now time.Time, d time.Duration, primary bool, o outcome) (trackerState, bool) {
	w := &t.cfg.window
	t.mu.Lock()
	if age := now.Sub(t.curStart); age >= w.maxAge || (age >= w.minAge && t.cur.total >= w.minCount) {
		t.rotate(now)
	}
	t.cur.record(d)
	if primary && o != outcomeAbandoned {
		if o != outcomeSuperseded {
			t.curPrimaries.total++
			switch o {
			case outcomeError:
				t.curPrimaries.errors++
			case outcomeRejected:
				t.curPrimaries.rejected++
			}
		}
		t.curPrimaryLat.record(d)
	}
	if now.Sub(t.lastRefresh) < w.refreshEvery {
		t.mu.Unlock()
		return trackerState{}, false
	}
	t.refresh(now)
	st := t.state
	t.mu.Unlock()
	return st, true
}

// rotate closes the current window. Its primary median moves the baseline
// unless the latency is shifted; a shift that lasts longer than the
// configured limit is accepted as the new normal.
func (t *tracker) rotate(now time.Time) {
	if m, ok := quantile2(&t.curPrimaryLat, &emptyHistogram, 0.5); ok && t.curPrimaryLat.total >= shiftMinCount {
		switch {
		case t.baseline == 0:
			t.baseline = m
		case !t.shiftedSince.IsZero() && now.Sub(t.shiftedSince) >= t.cfg.switchOff.MaxPause:
			t.baseline = m
			t.shiftedSince = time.Time{}
		case t.shiftedSince.IsZero():
			t.baseline = time.Duration((1-baselineAlpha)*float64(t.baseline) + baselineAlpha*float64(m))
		}
	}
	t.prev, t.cur = t.cur, t.prev
	t.cur.reset()
	t.curPrimaryLat.reset()
	t.prevPrimaries, t.curPrimaries = t.curPrimaries, windowCounts{}
	t.curStart = now
}

// refresh recomputes the delay and the overload state.
func (t *tracker) refresh(now time.Time) {
	t.lastRefresh = now
	cfg := t.cfg
	if cfg.quantile > 0 && t.cur.total+t.prev.total >= warmCount {
		if q, ok := quantile2(&t.cur, &t.prev, cfg.quantile); ok {
			t.state.delay = max(q, cfg.minDelay)
		}
	}

	so := cfg.switchOff
	overloaded, cause := false, Reason(0)
	n := t.curPrimaries.total + t.prevPrimaries.total
	if n >= rateMinCount {
		rej := float64(t.curPrimaries.rejected+t.prevPrimaries.rejected) / float64(n)
		errs := float64(t.curPrimaries.errors+t.prevPrimaries.errors) / float64(n)
		switch {
		case so.RejectRate > 0 && rej > so.RejectRate:
			overloaded, cause = true, ReasonRejections
		case so.ErrorRate > 0 && errs > so.ErrorRate:
			overloaded, cause = true, ReasonErrors
		}
	}
	if so.LatencyShift > 0 && t.baseline > 0 && t.curPrimaryLat.total >= shiftMinCount {
		m, _ := quantile2(&t.curPrimaryLat, &emptyHistogram, 0.5)
		if float64(m) > so.LatencyShift*float64(t.baseline) {
			if t.shiftedSince.IsZero() {
				t.shiftedSince = now
			}
		} else {
			t.shiftedSince = time.Time{}
		}
	}
	if !overloaded && !t.shiftedSince.IsZero() {
		overloaded, cause = true, ReasonQueueing
	}
	t.state.overloaded, t.state.cause = overloaded, cause
}
