package load

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Plan is a fixed rate or a step ramp.
type Plan struct {
	// Rate is the first (or only) step's rate; 0 is a closed loop.
	Rate float64
	// Duration bounds the whole run (required, at most MaxDuration).
	Duration time.Duration
	// Step, when Step.Inc > 0, adds Step.Inc every Step.Every until MaxRate
	// or Duration.
	Step StepSpec
	// MaxRate ends a ramp (0: no limit but Duration).
	MaxRate float64
	// SLA, when set, is checked on every step (Run) or searched for
	// (Search).
	SLA *SLA
}

func (p *Plan) validate() error {
	if p.Duration <= 0 {
		return fmt.Errorf("%w: a duration is required", ErrBadInput)
	}
	if p.Duration > MaxDuration {
		return fmt.Errorf("%w: duration %s is above the limit of %s", ErrBadInput, p.Duration, MaxDuration)
	}
	if p.Rate < 0 || p.Rate > MaxRate || math.IsNaN(p.Rate) {
		return fmt.Errorf("%w: bad rate %v", ErrBadInput, p.Rate)
	}
	if p.Step.Inc > 0 {
		if p.Rate == 0 {
			return fmt.Errorf("%w: a step ramp needs a starting rate, not max", ErrBadInput)
		}
		if p.Step.Every > p.Duration {
			return fmt.Errorf("%w: step duration %s is longer than the whole run (%s)", ErrBadInput, p.Step.Every, p.Duration)
		}
		if p.MaxRate > 0 && p.MaxRate < p.Rate {
			return fmt.Errorf("%w: max rate %v is below the starting rate %v", ErrBadInput, p.MaxRate, p.Rate)
		}
	}
	if p.SLA != nil && p.Rate == 0 {
		return fmt.Errorf("%w: an SLA needs a fixed rate, not max", ErrBadInput)
	}
	return nil
}

// Report is everything a run measured.
type Report struct {
	URL         string        `json:"url"`
	Method      string        `json:"method"`
	Connections int           `json:"connections"`
	Proto       string        `json:"protocol"`
	Start       time.Time     `json:"start"`
	Steps       []*StepResult `json:"steps"`
	SLA         *SearchResult `json:"sla,omitempty"`
	Interrupted bool          `json:"interrupted,omitempty"`
	// MaxConnections is the most connections open at once over the run.
	MaxConnections int64    `json:"max_connections"`
	Notes          []string `json:"notes,omitempty"`
	// Ticks is the time series, one point per tick.
	Ticks []Tick `json:"ticks,omitempty"`
	// GCSpikes sets the P99 spikes beside the watched target's GC cycles,
	// read from its memory; nil without a GC clock (Config.GCPoll).
	GCSpikes *GCSpikes `json:"gc_spikes,omitempty"`

	hlog []hlogLine
	tick time.Duration
	// The fine latency windows and the GC cycles behind GCSpikes, for the
	// HTML page.
	fine      []fineWin
	fineWidth int64
	cycles    []gcCycle
}

func newReport(e *Engine) *Report {
	c := &e.cfg
	proto := "http/1.1"
	switch {
	case e.client == nil:
	case c.URL.Scheme == "http":
		proto = "h2c"
	case c.Proto == ProtoHTTP2:
		proto = "h2 over TLS"
	case c.Proto == ProtoHTTP1:
		proto = "http/1.1 over TLS"
	default:
		proto = "TLS (h2 or http/1.1 by ALPN)"
	}
	return &Report{URL: c.URL.Redacted(), Method: c.Method, Connections: c.Connections, Proto: proto,
		Start: e.base, tick: c.Tick}
}

func (e *Engine) finish(r *Report) {
	r.Ticks = e.ticks
	r.hlog = e.hlog
	for _, s := range r.Steps {
		r.MaxConnections = max(r.MaxConnections, s.MaxConnections)
		if s.Interrupted {
			r.Interrupted = true
		}
	}
	if e.clock != nil {
		e.clock.close()
		cycles, polls, fails, err := e.clock.snapshot()
		if e.fine != nil {
			g := analyzeGCSpikes(e.fine.wins, e.fine.width, cycles, e.cfg.GCPoll)
			g.Polls, g.PollFailures, g.LateRequests = polls, fails, e.fine.late
			if err != nil {
				g.Note = fmt.Sprintf("%d of %d reads of the GC clock failed, the last: %v", fails, polls+fails, err)
			}
			r.GCSpikes = g
			r.fine, r.fineWidth, r.cycles = e.fine.wins, e.fine.width, cycles
		}
	}
	if e.clockNote != "" {
		r.Notes = append(r.Notes, e.clockNote)
	}
	if e.watch != nil && e.cfg.GC == nil {
		r.Notes = append(r.Notes, "GC cycles and pauses of the target are not reported: no runtime metrics source "+
			"(link gosleuth's agent into it, or give --pprof-url or --metrics-url)")
	}
}

// Run runs plan with cfg: one step at a fixed rate, or a ramp. It returns
// the report of what ran, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config, plan Plan) (*Report, error) {
	return withEngine(cfg, plan, func(e *Engine, rep *Report) { e.run(ctx, plan, rep) })
}

// withEngine validates plan, starts an engine, lets fn fill the report and
// returns it finished.
func withEngine(cfg Config, plan Plan, fn func(*Engine, *Report)) (*Report, error) {
	if err := plan.validate(); err != nil {
		return nil, err
	}
	e, err := NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rep := newReport(e)
	fn(e, rep)
	e.countUnanswered(rep)
	e.finish(rep)
	return rep, nil
}

func (e *Engine) run(ctx context.Context, plan Plan, rep *Report) {
	if plan.Step.Inc <= 0 {
		// Whole ticks, at least one, never beyond the duration.
		d := max(e.cfg.Tick, plan.Duration/e.cfg.Tick*e.cfg.Tick)
		rep.Steps = append(rep.Steps, e.checked(ctx, "fixed", plan.Rate, d, plan.SLA))
		return
	}
	// Steps last whole ticks: count what they really take against the
	// duration, so the run never outlasts it.
	every := e.roundUp(plan.Step.Every)
	left := plan.Duration
	for rate := plan.Rate; left >= every && ctx.Err() == nil; rate += plan.Step.Inc {
		if plan.MaxRate > 0 && rate > plan.MaxRate+1e-9 {
			break
		}
		rep.Steps = append(rep.Steps, e.checked(ctx, "ramp", rate, plan.Step.Every, plan.SLA))
		left -= every
	}
}

// roundUp returns d rounded up to whole ticks, as Step runs it.
func (e *Engine) roundUp(d time.Duration) time.Duration {
	t := e.cfg.Tick
	return max(t, (d+t-1)/t*t)
}

func (e *Engine) checked(ctx context.Context, phase string, rate float64, d time.Duration, sla *SLA) *StepResult {
	r := e.Step(ctx, phase, rate, d)
	if sla != nil {
		met, v := sla.Met(r)
		r.SLA = &SLAStepCheck{Met: met, ValueMS: v}
	}
	return r
}

// SearchResult is the outcome of an SLA search.
type SearchResult struct {
	SLA string `json:"sla"`
	// Found is false when even the first rate failed, or the search was cut
	// short; Note says which.
	Found bool `json:"found"`
	// MaxRate is the median over the repeats of the highest rate that met
	// the SLA; Min and Max are the spread.
	MaxRate float64   `json:"max_rate"`
	Min     float64   `json:"min_rate"`
	Max     float64   `json:"max_rate_high"`
	Repeats []float64 `json:"repeats"`
	// LastPass and FirstFail bracket the knee found by the ramp.
	LastPass  float64 `json:"ramp_last_pass"`
	FirstFail float64 `json:"ramp_first_fail"`
	// FailReason says why the first failing ramp step failed.
	FailReason string `json:"fail_reason,omitempty"`
	Note       string `json:"note,omitempty"`
}

// SearchRepeats is how many times the bisection is repeated.
const SearchRepeats = 3

// maxLateRetries is how many times a search repeats a step that was invalid
// only because the generator was late.
const maxLateRetries = 2

// maxBisect bounds the bisection steps of one repeat.
const maxBisect = 4

// passes judges a search step: SLA met, errors at most 1%, step valid.
func passes(r *StepResult, sla *SLA) (bool, string) {
	met, v := sla.Met(r)
	r.SLA = &SLAStepCheck{Met: met, ValueMS: v}
	switch {
	case !r.Valid:
		return false, "invalid step: " + r.Invalid[0]
	case r.Requests > 0 && float64(r.Errors) > 0.01*float64(r.Requests):
		return false, fmt.Sprintf("errors %.2f%% > 1%%", 100*float64(r.Errors)/float64(r.Requests))
	case !met:
		return false, fmt.Sprintf("p%g %.2f ms > %s", sla.Quantile, v, sla.Limit)
	}
	return true, ""
}

// Search ramps from plan.Rate by plan.Step until plan.SLA fails (or errors
// exceed 1%, or a step is invalid), then bisects between the last passing
// and the first failing rate with steps half as long, SearchRepeats times,
// and reports the median and spread of the rates found. plan.Duration bounds
// the whole search.
func Search(ctx context.Context, cfg Config, plan Plan) (*Report, error) {
	if plan.SLA == nil || plan.Step.Inc <= 0 {
		return nil, fmt.Errorf("%w: a search needs an SLA and a step", ErrBadInput)
	}
	return withEngine(cfg, plan, func(e *Engine, rep *Report) { e.search(ctx, plan, rep) })
}

func (e *Engine) search(ctx context.Context, plan Plan, rep *Report) {
	sr := &SearchResult{SLA: plan.SLA.Text}
	rep.SLA = sr
	deadline := time.Now().Add(plan.Duration)
	fits := func(d time.Duration) bool { return time.Until(deadline) >= e.roundUp(d) && ctx.Err() == nil }
	step := func(phase string, rate float64, d time.Duration) (bool, string) {
		var ok bool
		var why string
		for try := 0; ; try++ {
			r := e.Step(ctx, phase, rate, d)
			rep.Steps = append(rep.Steps, r)
			ok, why = passes(r, plan.SLA)
			if r.Interrupted {
				return false, "interrupted"
			}
			// A late generator says nothing about the server: repeat the
			// step (twice at most) before counting it as a failure.
			if ok || !r.GeneratorLate || try == maxLateRetries || !fits(d) {
				break
			}
			r.Phase += " (repeated: generator late)"
		}
		if !ok {
			e.Drain(ctx, e.cfg.Timeout)
		}
		return ok, why
	}
	for rate := plan.Rate; ; rate += plan.Step.Inc {
		if plan.MaxRate > 0 && rate > plan.MaxRate+1e-9 {
			sr.Note = fmt.Sprintf("the SLA held up to the max rate %g", plan.MaxRate)
			break
		}
		if !fits(plan.Step.Every) {
			sr.Note = "the duration ran out (or the run was interrupted) during the ramp"
			break
		}
		ok, why := step("ramp", rate, plan.Step.Every)
		if !ok {
			sr.FirstFail, sr.FailReason = rate, why
			break
		}
		sr.LastPass = rate
	}
	if sr.FirstFail == 0 || sr.LastPass == 0 {
		if sr.FirstFail > 0 {
			sr.Note = fmt.Sprintf("the SLA failed at the first rate %g (%s)", sr.FirstFail, sr.FailReason)
		} else if sr.LastPass > 0 {
			sr.MaxRate, sr.Min, sr.Max, sr.Found = sr.LastPass, sr.LastPass, sr.LastPass, true
			sr.Repeats = []float64{sr.LastPass}
		}
		return
	}
	short := max(plan.Step.Every/2, e.cfg.Tick*2)
	tol := max(plan.Step.Inc/16, sr.LastPass*0.01, 1)
	for rep1 := 1; rep1 <= SearchRepeats; rep1++ {
		lo, hi := sr.LastPass, sr.FirstFail
		for i := 0; i < maxBisect && hi-lo > tol; i++ {
			if !fits(short) {
				sr.Note = "the duration ran out (or the run was interrupted) during the bisection"
				break
			}
			mid := math.Round((lo + hi) / 2)
			if ok, _ := step(fmt.Sprintf("bisect %d", rep1), mid, short); ok {
				lo = mid
			} else {
				hi = mid
			}
		}
		if sr.Note != "" {
			break
		}
		sr.Repeats = append(sr.Repeats, lo)
	}
	if len(sr.Repeats) > 0 {
		s := slices.Clone(sr.Repeats)
		slices.Sort(s)
		sr.MaxRate, sr.Min, sr.Max, sr.Found = s[len(s)/2], s[0], s[len(s)-1], true
	}
}

// SLAFailed reports whether the run had an SLA and did not meet it: a
// search that found no passing rate, or a step that missed it.
func (r *Report) SLAFailed() bool {
	if r.SLA != nil {
		return !r.SLA.Found
	}
	for _, s := range r.Steps {
		if s.SLA != nil && !s.SLA.Met {
			return true
		}
	}
	return false
}

// countUnanswered waits, up to the request timeout, for the requests still
// in flight when the last step ended, and adds what became of them to that
// step: errors (timeouts, mostly) by kind, and those still unanswered after
// the wait as timeouts too. Either makes the step invalid: a server that
// hangs must not look fast because its slowest requests were never finished.
func (e *Engine) countUnanswered(rep *Report) {
	if len(rep.Steps) == 0 || e.inFlight.Load() == 0 {
		return
	}
	last := rep.Steps[len(rep.Steps)-1]
	last.InFlightAtEnd = e.inFlight.Load()
	wait := e.cfg.Timeout
	if last.Interrupted {
		wait = min(wait, time.Second) // the user asked to stop
	}
	e.Drain(context.Background(), wait)
	e.collect() // what finished while we waited
	failed := e.tick.errors()
	for i, v := range e.tick.errs {
		if v > 0 {
			last.ErrorKinds[ErrKind(i).String()] += v
		}
	}
	n := e.inFlight.Load()
	last.Unanswered = n
	if n > 0 {
		last.ErrorKinds[ErrTimeout.String()] += n
	}
	last.Errors += failed + n
	if failed+n > 0 {
		last.invalid(fmt.Sprintf("%d of the %d requests in flight at the end failed or got no answer within %s (counted as errors)",
			failed+n, last.InFlightAtEnd, wait))
	}
}
