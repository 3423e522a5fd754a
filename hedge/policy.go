package hedge

import (
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"
)

// Defaults of a Policy built without options.
const (
	// DefaultPercentile is the quantile of recent attempt latencies used as
	// the delay. It is a little above P95 so that the share of requests
	// that get a hedge (about 1-q) stays well inside DefaultBudget and the
	// budget is rarely what decides whether a slow request gets a hedge.
	DefaultPercentile = 0.97
	// DefaultMinDelay is the floor of the adaptive delay.
	DefaultMinDelay = time.Millisecond
	// DefaultInitialDelay is the adaptive delay until enough latencies have
	// been seen to estimate the percentile.
	DefaultInitialDelay = 10 * time.Millisecond
	// DefaultBudget is the ratio of extra attempts to real requests.
	DefaultBudget = 0.05
	// DefaultBurst is how many extra attempts the budget allows beyond its
	// ratio.
	DefaultBurst = 10
	// DefaultMaxInFlight is the cap on extra attempts in flight at once.
	DefaultMaxInFlight = 16
	// DefaultMaxAttempts counts the primary and one hedge.
	DefaultMaxAttempts = 2
	// MaxAttemptsLimit is the largest value WithMaxAttempts accepts.
	MaxAttemptsLimit = 5
	// maxPushback caps a pause asked for by Retry-After or Pause.
	maxPushback = 5 * time.Minute
)

// SwitchOff sets when hedging pauses because the backend looks
// overloaded or hedges do not pay. A zero field disables its check. For
// the error, rejection and latency checks only primaries (first attempts)
// are counted, over the current and the previous latency window (each at
// least one second and 200 attempts, or ten seconds).
type SwitchOff struct {
	// ErrorRate pauses hedging while more than this share of primaries
	// end in a transport error or a 5xx status other than 503. Default 0.05.
	ErrorRate float64
	// RejectRate pauses hedging while more than this share of primaries
	// are answered 429 or 503. Default 0.01.
	RejectRate float64
	// LatencyShift pauses hedging while the median latency of the current
	// window is more than LatencyShift times the long-run median: the
	// whole distribution moved up, which is queueing rather than a tail.
	// Default 2.
	LatencyShift float64
	// MaxPause is how long a latency shift may pause hedging before the
	// new level is taken as the long-run median. Default 30 s.
	MaxPause time.Duration
	// MinWinRate pauses hedging while fewer than this share of hedges win
	// (answer their request before the other attempts), judged over each
	// run of 20 hedges whose requests were answered. Such hedges add load
	// and buy nothing: near capacity, or when every attempt takes about as
	// long as any other, a hedge just queues behind its primary. While
	// paused, a hedge that would have been sent still goes out as a probe
	// when at least 10 such hedges and one second have passed since the
	// last probe (20 and 2 s, 40 and 4 s, then 80 and 8 s after each
	// further run of 20 probes that still lose), and hedging resumes as
	// soon as the probes of a run win often enough.
	//
	// Default 0.1: when the delay sits near the P97 of latency, a hedge
	// that wins less than one time in ten rescues at most 0.3% of
	// requests, too few to move the P99, while the losers still add their
	// load. Hedges against a real tail win far more often: 90% with the
	// adaptive delay and 98% with a fixed 5 ms one in the heavy tail
	// scenario of bench/hedge-tail.
	MinWinRate float64
}

// DefaultSwitchOff is the SwitchOff of a Policy built without WithSwitchOff.
var DefaultSwitchOff = SwitchOff{
	ErrorRate: 0.05, RejectRate: 0.01, LatencyShift: 2, MaxPause: 30 * time.Second, MinWinRate: 0.1,
}

// config collects what the options set.
type config struct {
	fixedDelay  time.Duration // > 0: fixed delay
	quantile    float64       // > 0: adaptive delay
	minDelay    time.Duration
	startDelay  time.Duration
	ratio       float64
	burst       int
	maxInFlight int
	maxAttempts int
	switchOff   SwitchOff
	window      windowing
	policyOpts  int // how many policy options were applied
	policy      *Policy
	target      func(*http.Request, int) *http.Request
}

func defaultConfig() config {
	return config{
		quantile:    DefaultPercentile,
		minDelay:    DefaultMinDelay,
		startDelay:  DefaultInitialDelay,
		ratio:       DefaultBudget,
		burst:       DefaultBurst,
		maxInFlight: DefaultMaxInFlight,
		maxAttempts: DefaultMaxAttempts,
		switchOff:   DefaultSwitchOff,
		window:      defaultWindowing,
	}
}

func (c *config) initialDelay() time.Duration {
	if c.quantile == 0 {
		return c.fixedDelay
	}
	return max(c.startDelay, c.minDelay)
}

// Option configures a Policy or a Transport.
type Option func(*config)

// policyOption marks an option that configures a Policy, so that
// NewTransport can refuse to mix it with WithPolicy.
func policyOption(f func(*config)) Option {
	return func(c *config) {
		c.policyOpts++
		f(c)
	}
}

// WithDelay sends a hedge after the fixed delay d instead of an adaptive
// one. It panics if d is not positive.
func WithDelay(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("hedge: WithDelay(%v): delay must be positive", d))
	}
	return policyOption(func(c *config) { c.fixedDelay, c.quantile = d, 0 })
}

// WithPercentileDelay sends a hedge once an attempt has taken longer than
// the q-quantile of recent attempt latencies (for example 0.95 for the
// P95), but never sooner than the floor set by WithMinDelay. Attempts that
// were cancelled because another one won, or because the caller gave up,
// are recorded at the time they had run, so the estimate is not biased
// towards the fast answers. Until enough latencies are known the delay is
// DefaultInitialDelay (see WithInitialDelay). The share of requests that
// get a hedge is about 1-q, so keep it well under the budget. It panics
// unless 0 < q < 1. This is the default, with DefaultPercentile.
func WithPercentileDelay(q float64) Option {
	if !(q > 0 && q < 1) {
		panic(fmt.Sprintf("hedge: WithPercentileDelay(%v): quantile must be in (0, 1)", q))
	}
	return policyOption(func(c *config) { c.quantile, c.fixedDelay = q, 0 })
}

// WithMinDelay sets the floor of the adaptive delay (default
// DefaultMinDelay). It panics if d is negative.
func WithMinDelay(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("hedge: WithMinDelay(%v): delay must not be negative", d))
	}
	return policyOption(func(c *config) { c.minDelay = d })
}

// WithInitialDelay sets the adaptive delay used until enough latencies are
// known (default DefaultInitialDelay). It panics if d is not positive.
func WithInitialDelay(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("hedge: WithInitialDelay(%v): delay must be positive", d))
	}
	return policyOption(func(c *config) { c.startDelay = d })
}

// WithBudget caps extra attempts at ratio times the number of real
// requests, plus a small burst (see WithBurst). The budget is a token
// bucket credited by each request, so it follows the real traffic: over
// any stretch of time, extra attempts <= ratio x requests + burst. It
// panics unless 0 <= ratio <= MaxAttemptsLimit-1.
func WithBudget(ratio float64) Option {
	if !(ratio >= 0 && ratio <= MaxAttemptsLimit-1) {
		panic(fmt.Sprintf("hedge: WithBudget(%v): ratio must be in [0, %d]", ratio, MaxAttemptsLimit-1))
	}
	return policyOption(func(c *config) { c.ratio = ratio })
}

// WithBurst sets how many extra attempts the budget allows beyond its
// ratio (default DefaultBurst). It panics if n < 1.
func WithBurst(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("hedge: WithBurst(%d): burst must be at least 1", n))
	}
	return policyOption(func(c *config) { c.burst = n })
}

// WithMaxInFlight caps the extra attempts running at once across all
// requests of the Policy (default DefaultMaxInFlight). It panics if n < 1.
func WithMaxInFlight(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("hedge: WithMaxInFlight(%d): cap must be at least 1", n))
	}
	return policyOption(func(c *config) { c.maxInFlight = n })
}

// WithMaxAttempts sets the number of attempts per request, the primary
// included (default 2: one hedge). Each further hedge is sent one delay
// after the previous attempt. It panics unless 1 <= n <= MaxAttemptsLimit;
// 1 turns hedging off.
func WithMaxAttempts(n int) Option {
	if n < 1 || n > MaxAttemptsLimit {
		panic(fmt.Sprintf("hedge: WithMaxAttempts(%d): must be in [1, %d]", n, MaxAttemptsLimit))
	}
	return policyOption(func(c *config) { c.maxAttempts = n })
}

// WithSwitchOff replaces DefaultSwitchOff. It panics on negative fields
// and on a MinWinRate above 1.
func WithSwitchOff(s SwitchOff) Option {
	if s.ErrorRate < 0 || s.RejectRate < 0 || s.LatencyShift < 0 || s.MaxPause < 0 ||
		!(s.MinWinRate >= 0 && s.MinWinRate <= 1) ||
		math.IsNaN(s.ErrorRate+s.RejectRate+s.LatencyShift) {
		panic(fmt.Sprintf("hedge: WithSwitchOff(%+v): fields must not be negative, MinWinRate at most 1", s))
	}
	if s.MaxPause == 0 {
		s.MaxPause = DefaultSwitchOff.MaxPause
	}
	return policyOption(func(c *config) { c.switchOff = s })
}

// Reason says why a hedge was not sent.
type Reason int

// Reasons a hedge was not sent, as counted in Stats.Denied.
const (
	// ReasonBudget: the budget had no token left.
	ReasonBudget Reason = iota
	// ReasonInFlight: the cap on extra attempts in flight was reached.
	ReasonInFlight
	// ReasonErrors: too many primaries ended in errors (SwitchOff.ErrorRate).
	ReasonErrors
	// ReasonRejections: too many primaries were answered 429 or 503
	// (SwitchOff.RejectRate).
	ReasonRejections
	// ReasonQueueing: the median latency shifted up (SwitchOff.LatencyShift).
	ReasonQueueing
	// ReasonPushback: the server asked to back off (Retry-After), or
	// Policy.Pause was called.
	ReasonPushback
	// ReasonNotIdempotent: the request's method is not idempotent and the
	// request is not marked idempotent. Counted once per request.
	ReasonNotIdempotent
	// ReasonNotReplayable: the request body cannot be sent twice (no
	// GetBody), or the request asks for a protocol upgrade. Counted once
	// per request.
	ReasonNotReplayable
	// ReasonLowWinRate: too few recent hedges won (SwitchOff.MinWinRate);
	// hedging is paused but for a trickle of probes.
	ReasonLowWinRate
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonBudget:        "budget",
	ReasonInFlight:      "in-flight",
	ReasonErrors:        "overload-errors",
	ReasonRejections:    "overload-rejections",
	ReasonQueueing:      "overload-queueing",
	ReasonPushback:      "pushback",
	ReasonNotIdempotent: "not-idempotent",
	ReasonNotReplayable: "not-replayable",
	ReasonLowWinRate:    "low-win-rate",
}

// String returns the reason's name, such as "budget" or
// "overload-queueing", and "none" for -1 (see Stats.Paused).
func (r Reason) String() string {
	if r == -1 {
		return "none"
	}
	if r < 0 || r >= numReasons {
		return fmt.Sprintf("Reason(%d)", int(r))
	}
	return reasonNames[r]
}

// Reasons returns every Reason, in order.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Stats is a snapshot of a Policy's counters. Counters only grow.
type Stats struct {
	// Requests counts real requests: calls of Do and Transport.RoundTrip.
	Requests uint64
	// Hedges counts extra attempts sent.
	Hedges uint64
	// HedgesWon counts requests answered by an extra attempt.
	HedgesWon uint64
	// Denied counts hedges not sent, by reason; every Reason is present.
	Denied map[Reason]uint64
	// InFlight is the number of extra attempts running now.
	InFlight int
	// Delay is the current hedge delay.
	Delay time.Duration
	// Paused is the reason hedging is paused now, or -1 when it is not.
	// During a ReasonLowWinRate pause a few probes are still sent.
	Paused Reason
	// ExtraLoad is Hedges / Requests: the extra attempts sent per real
	// request since the Policy was created.
	ExtraLoad float64
	// Resent counts attempts a Transport sent again because net/http
	// failed them with context.Canceled though their context was live: the
	// connection they reused was closed by the cancellation of a losing
	// attempt (see Transport).
	Resent uint64
}

// Policy decides when to send a hedge and whether one may be sent. It is
// safe for concurrent use, and one Policy may be shared by several
// Transports and calls of Do, which then share its budget, in-flight cap,
// latency estimate and overload state. Create it with NewPolicy.
type Policy struct {
	cfg     config
	tracker *tracker
	budget  *budget
	wins    winGate

	delay       atomic.Int64 // current delay, ns
	paused      atomic.Int32 // Reason+1 of the overload switch, 0 when off
	pushedUntil atomic.Int64 // pause asked by the server, unix ns
	inFlight    atomic.Int64

	requests  atomic.Uint64
	hedges    atomic.Uint64
	hedgesWon atomic.Uint64
	denied    [numReasons]atomic.Uint64
	spurious  atomic.Uint64 // attempts resent after a spurious cancellation
}

// NewPolicy returns a Policy configured by opts. Without options it uses
// an adaptive delay at DefaultPercentile of recent latencies (floor
// DefaultMinDelay), a budget of DefaultBudget of real requests plus
// DefaultBurst, at most DefaultMaxInFlight hedges in flight, two attempts
// per request and DefaultSwitchOff. Options that only concern a Transport
// (WithPolicy, WithHedgeTarget, WithHedgeHosts) are ignored.
func NewPolicy(opts ...Option) *Policy {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	return newPolicy(cfg)
}

func newPolicy(cfg config) *Policy {
	cfg.policy, cfg.target = nil, nil
	p := &Policy{cfg: cfg, budget: newBudget(cfg.ratio, cfg.burst)}
	p.tracker = newTracker(&p.cfg, time.Now())
	p.delay.Store(int64(cfg.initialDelay()))
	return p
}

// Delay returns the current hedge delay.
func (p *Policy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// Pause stops hedging for d (at most five minutes), as when a server asks
// clients to back off. A shorter pause does not cut a longer one short.
func (p *Policy) Pause(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(min(d, maxPushback)).UnixNano()
	for {
		v := p.pushedUntil.Load()
		if v >= until || p.pushedUntil.CompareAndSwap(v, until) {
			return
		}
	}
}

// Stats returns a snapshot of the counters.
func (p *Policy) Stats() Stats {
	s := Stats{
		Requests:  p.requests.Load(),
		Hedges:    p.hedges.Load(),
		HedgesWon: p.hedgesWon.Load(),
		Denied:    make(map[Reason]uint64, numReasons),
		InFlight:  int(p.inFlight.Load()),
		Delay:     p.Delay(),
		Paused:    p.pausedReason(time.Now()),
		Resent:    p.spurious.Load(),
	}
	for i := range p.denied {
		s.Denied[Reason(i)] = p.denied[i].Load()
	}
	if s.Requests > 0 {
		s.ExtraLoad = float64(s.Hedges) / float64(s.Requests)
	}
	return s
}

// pausedReason returns why hedging is paused now, or -1.
func (p *Policy) pausedReason(now time.Time) Reason {
	if r := p.overloadReason(now); r >= 0 {
		return r
	}
	if p.wins.paused() {
		return ReasonLowWinRate
	}
	return -1
}

// overloadReason returns why the overload switch or a pushback pauses
// hedging now, or -1.
func (p *Policy) overloadReason(now time.Time) Reason {
	if r := p.paused.Load(); r > 0 {
		return Reason(r - 1)
	}
	if now.UnixNano() < p.pushedUntil.Load() {
		return ReasonPushback
	}
	return -1
}

// begin counts a real request and credits the budget.
func (p *Policy) begin() {
	p.requests.Add(1)
	p.budget.deposit()
}

func (p *Policy) deny(r Reason) { p.denied[r].Add(1) }

// admit decides whether an extra attempt may be sent now. On true the
// caller owns one in-flight slot and must call release when the attempt
// ends.
func (p *Policy) admit() bool {
	now := time.Now()
	if r := p.overloadReason(now); r >= 0 {
		p.deny(r)
		return false
	}
	if !p.wins.probe(now, p.cfg.window.probeInterval) {
		p.deny(ReasonLowWinRate)
		return false
	}
	if p.inFlight.Add(1) > int64(p.cfg.maxInFlight) {
		p.inFlight.Add(-1)
		p.deny(ReasonInFlight)
		return false
	}
	if !p.budget.withdraw() {
		p.inFlight.Add(-1)
		p.deny(ReasonBudget)
		return false
	}
	p.hedges.Add(1)
	return true
}

// release frees the in-flight slot of an extra attempt.
func (p *Policy) release() { p.inFlight.Add(-1) }

// hedged records how a request that sent hedges was answered: won tells
// whether one of its hedges answered it. When the caller gave up, the
// request says nothing about whether hedges pay, and only a win is
// counted.
func (p *Policy) hedged(hedges int, won, gaveUp bool) {
	if won {
		p.hedgesWon.Add(1)
	}
	if !gaveUp {
		p.wins.record(hedges, won, p.cfg.switchOff.MinWinRate)
	}
}

// record feeds one attempt's latency and outcome to the estimator and the
// overload switch, and publishes their new state when it was refreshed.
func (p *Policy) record(now time.Time, d time.Duration, primary bool, o outcome) {
	st, refreshed := p.tracker.record(now, d, primary, o)
	if !refreshed {
		return
	}
	p.delay.Store(int64(st.delay))
	if st.overloaded {
		p.paused.Store(int32(st.cause) + 1)
	} else {
		p.paused.Store(0)
	}
}
