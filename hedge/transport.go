package hedge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Transport is an http.RoundTripper that hedges idempotent requests: when
// the response headers of a request have not arrived after the policy's
// delay, it sends the same request again (to the same backend, or to
// another one chosen by WithHedgeTarget) and returns whichever answer
// comes first. The other attempts are cancelled at once; the winner's
// context is cancelled when its response body is closed, so the body can
// be read in full after RoundTrip returns.
//
// A request is hedged only when its method is GET, HEAD, OPTIONS, PUT or
// DELETE, or it has an Idempotency-Key or X-Idempotency-Key header, or it
// went through Idempotent; when its body, if any, can be replayed through
// GetBody (http.NewRequest sets it for the usual in-memory bodies); and
// when it does not ask for a protocol upgrade. Other requests are passed
// to the base transport untouched.
//
// An answer that is a transport error, a 429 or a 5xx does not win while
// another attempt is still running; if every attempt fails, the first
// failure is returned. A 429 or 503 with a Retry-After header pauses
// hedging for that long.
//
// The base transport must honour request context cancellation, as
// http.Transport does: a losing attempt stops only when its context is
// cancelled. Cancelling an attempt whose bodiless response is arriving can
// make http.Transport close a connection it has already handed to another
// request, which then fails with context.Canceled; such an attempt is sent
// once more (it is idempotent) and counted in Stats.Resent. Create a Transport with NewTransport; it is safe for
// concurrent use.
type Transport struct {
	base   http.RoundTripper
	policy *Policy
	target func(*http.Request, int) *http.Request
}

// NewTransport returns a Transport that hedges requests sent through base
// (http.DefaultTransport when nil). It uses the Policy given by WithPolicy,
// or a new one built from opts as NewPolicy does. It panics if WithPolicy
// is combined with options that configure a Policy.
func NewTransport(base http.RoundTripper, opts ...Option) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	p := cfg.policy
	if p == nil {
		p = newPolicy(cfg)
	} else if cfg.policyOpts > 0 {
		panic("hedge: NewTransport: WithPolicy cannot be combined with options that configure a Policy")
	}
	return &Transport{base: base, policy: p, target: cfg.target}
}

// WithPolicy makes a Transport use p, shared with other Transports or
// calls of Do, instead of a Policy of its own.
func WithPolicy(p *Policy) Option {
	if p == nil {
		panic("hedge: WithPolicy(nil)")
	}
	return func(c *config) { c.policy = p }
}

// WithHedgeTarget lets a Transport send extra attempts elsewhere, for
// example to another replica. f receives a deep copy of the request for
// attempt n (1 for the first hedge), with its own context and body, and
// returns the request to send; it may modify and return its argument, and
// must not return nil.
func WithHedgeTarget(f func(req *http.Request, attempt int) *http.Request) Option {
	return func(c *config) { c.target = f }
}

// WithHedgeHosts sends hedge n to hosts[(n-1) % len(hosts)] (a host or
// host:port replacing the URL's), and sets the Host header from it. The
// primary attempt still goes to the request's own URL.
func WithHedgeHosts(hosts ...string) Option {
	if len(hosts) == 0 {
		panic("hedge: WithHedgeHosts: no hosts")
	}
	hosts = append([]string(nil), hosts...)
	return WithHedgeTarget(func(req *http.Request, attempt int) *http.Request {
		req.URL.Host = hosts[(attempt-1)%len(hosts)]
		req.Host = ""
		return req
	})
}

type idempotentKey struct{}

// Idempotent returns a shallow copy of req marked as safe to send twice,
// so that a Transport hedges it whatever its method.
func Idempotent(req *http.Request) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), idempotentKey{}, true))
}

// Policy returns the Policy the Transport uses.
func (t *Transport) Policy() *Policy { return t.policy }

// Stats returns the counters of the Transport's Policy.
func (t *Transport) Stats() Stats { return t.policy.Stats() }

// CloseIdleConnections closes the idle connections of the base transport
// if it has such a method.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// hedgeable reports whether req may be sent more than once, and why not.
// Header keys are looked up in canonical form, without the cost of
// canonicalising on every request.
func hedgeable(req *http.Request) (Reason, bool) {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
	default:
		if !hasHeader(req.Header, "Idempotency-Key") && !hasHeader(req.Header, "X-Idempotency-Key") &&
			req.Context().Value(idempotentKey{}) == nil {
			return ReasonNotIdempotent, false
		}
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return ReasonNotReplayable, false
	}
	if hasHeader(req.Header, "Upgrade") {
		return ReasonNotReplayable, false
	}
	return 0, true
}

// hasHeader reports whether h has a non-empty value for the canonical key.
func hasHeader(h http.Header, key string) bool {
	v := h[key]
	return len(v) > 0 && v[0] != ""
}

// RoundTrip implements http.RoundTripper. The primary attempt runs on the
// caller's goroutine; hedges run on goroutines of their own.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.policy
	p.begin()
	if p.cfg.maxAttempts < 2 {
		return t.base.RoundTrip(req)
	}
	if r, ok := hedgeable(req); !ok {
		p.deny(r)
		return t.base.RoundTrip(req)
	}

	c := &call{t: t, req: req, next: 1, pending: 1}
	c.pctx.init(req.Context())
	// The primary's request lives in the call: one allocation for both.
	c.preq = *req.WithContext(&c.pctx)
	c.att[0] = attemptState{start: time.Now(), started: true}
	c.mu.Lock()
	c.timer = armTimer(c, p.Delay())
	c.mu.Unlock()

	resp, err := t.send(&c.preq)
	now := time.Now()

	c.mu.Lock()
	if c.hedges == 0 {
		// Fast path: no hedge was sent, and none will be.
		c.decided = true
		c.att[0].returned = true
		c.mu.Unlock()
		c.timer.disarm()
		p.record(now, now.Sub(c.att[0].start), true, t.classify(resp, err, req))
		return c.finishWinner(0, resp, err)
	}
	discard := c.deliver(0, resp, err, now)
	done := c.done
	c.mu.Unlock()
	drain(discard)
	<-done
	return c.resp, c.err
}

// send is one attempt through the base transport.
//
// net/http's Transport puts a connection back in its idle pool as soon as a
// response without a body arrives, before the response reaches the
// request's RoundTrip. If that request's context is cancelled in between,
// as a losing attempt's is, Transport closes the connection that another
// request may already be using, and that request fails with the cancelled
// request's error, context.Canceled, though nothing cancelled it. Hedging
// cancels losers all the time, so send tells that case apart (the
// attempt's own context is live) and sends the attempt once more: it is
// idempotent, or it would not be hedged.
func (t *Transport) send(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil || !errors.Is(err, context.Canceled) || r.Context().Err() != nil {
		return resp, err
	}
	if r.Body != nil && r.Body != http.NoBody {
		if r.GetBody == nil {
			return resp, err
		}
		body, berr := r.GetBody()
		if berr != nil {
			return resp, err
		}
		r.Body = body
	}
	t.policy.spurious.Add(1)
	return t.base.RoundTrip(r)
}

// call is one hedged request.
type call struct {
	t     *Transport
	req   *http.Request
	preq  http.Request // the primary's request: req with pctx
	timer *hedgeTimer
	pctx  primaryCtx // the primary's context
	body  cancelBody // the winner's body, when it has one

	mu      sync.Mutex
	next    int // the attempt slot the timer considers next
	hedges  int // extra attempts started
	pending int // attempts started whose RoundTrip has not returned
	decided bool
	att     [MaxAttemptsLimit]attemptState
	hasHeld bool // a failure is kept in case every attempt fails
	held    int  // the attempt that failed
	heldR   *http.Response
	heldErr error
	done    chan struct{} // closed once decided; made with the first hedge
	resp    *http.Response
	err     error
}

type attemptState struct {
	cancel   context.CancelFunc // nil for the primary, which uses pctx
	start    time.Time
	started  bool
	returned bool // its RoundTrip returned
	recorded bool // its latency went to the policy
}

// fire runs on the timer: it sends the next hedge if the policy allows.
func (c *call) fire() {
	p := c.t.policy
	c.mu.Lock()
	if c.decided || c.next >= p.cfg.maxAttempts {
		c.mu.Unlock()
		return
	}
	i := c.next
	c.next++
	if c.next < p.cfg.maxAttempts {
		c.timer.t.Reset(p.Delay())
	}
	if !p.admit() {
		c.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(c.req.Context())
	c.att[i] = attemptState{cancel: cancel, start: time.Now(), started: true}
	c.hedges++
	c.pending++
	if c.done == nil {
		c.done = make(chan struct{})
	}
	c.mu.Unlock()
	go c.runHedge(i, ctx)
}

// runHedge sends extra attempt i and delivers its answer.
func (c *call) runHedge(i int, ctx context.Context) {
	t := c.t
	var resp *http.Response
	r, err := t.hedgeRequest(c.req, ctx, i)
	if err == nil {
		resp, err = t.send(r)
	}
	now := time.Now()
	t.policy.release()
	c.mu.Lock()
	discard := c.deliver(i, resp, err, now)
	c.mu.Unlock()
	drain(discard)
}

// hedgeRequest builds extra attempt i: a deep copy of orig with its own
// context and a fresh body, sent where the hedge target says.
func (t *Transport) hedgeRequest(orig *http.Request, ctx context.Context, i int) (*http.Request, error) {
	r := orig.Clone(ctx)
	if orig.Body != nil && orig.Body != http.NoBody {
		body, err := orig.GetBody()
		if err != nil {
			return nil, fmt.Errorf("hedge: replay request body: %w", err)
		}
		r.Body = body
	}
	if t.target != nil {
		if r = t.target(r, i); r == nil {
			return nil, errors.New("hedge: hedge target returned a nil request")
		}
	}
	return r, nil
}

// deliver takes attempt i's answer; c.mu is held. It returns a response
// the caller must drain and close outside the lock, if any.
func (c *call) deliver(i int, resp *http.Response, err error, now time.Time) *http.Response {
	p := c.t.policy
	a := &c.att[i]
	a.returned = true
	c.pending--
	if c.decided {
		return resp // lost; recorded when the winner was picked
	}
	o := c.t.classify(resp, err, c.req)
	p.record(now, now.Sub(a.start), i == 0, o)
	a.recorded = true
	if o != outcomeOK && c.pending > 0 {
		// Keep the first failure in case every attempt fails.
		if !c.hasHeld {
			c.hasHeld, c.held, c.heldR, c.heldErr = true, i, resp, err
			return nil
		}
		c.cancel(i)
		return resp
	}
	winner, discard := i, (*http.Response)(nil)
	switch {
	case c.hasHeld && o == outcomeOK:
		discard = c.heldR // the kept failure lost
	case c.hasHeld:
		winner, discard = c.held, resp // every attempt failed: the first failure wins
		resp, err = c.heldR, c.heldErr
	}
	c.hasHeld, c.heldR, c.heldErr = false, nil, nil
	c.decided = true
	c.timer.t.Stop()
	for j := range c.att {
		b := &c.att[j]
		if j == winner || !b.started {
			continue
		}
		if !b.returned && !b.recorded {
			p.record(now, now.Sub(b.start), j == 0, outcomeSuperseded)
			b.recorded = true
		}
		c.cancel(j)
	}
	p.hedged(c.hedges, o == outcomeOK && winner > 0, c.req.Context().Err() != nil)
	c.resp, c.err = c.finishWinner(winner, resp, err)
	if c.done != nil {
		close(c.done)
	}
	return discard
}

// cancel cancels attempt i's context.
func (c *call) cancel(i int) {
	if i == 0 {
		c.pctx.cancel(context.Canceled)
		return
	}
	c.att[i].cancel()
}

// finishWinner ties the cancellation of winning attempt i to its body's
// Close.
func (c *call) finishWinner(i int, resp *http.Response, err error) (*http.Response, error) {
	if err != nil || resp == nil || resp.Body == nil {
		c.cancel(i)
		return resp, err
	}
	c.body = cancelBody{ReadCloser: resp.Body, c: c, i: i}
	resp.Body = &c.body
	return resp, nil
}

// cancelBody cancels the winning attempt's context when closed.
type cancelBody struct {
	io.ReadCloser
	c *call
	i int
}

// Close closes the body, then cancels the attempt's context.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.c.cancel(b.i)
	return err
}

// drain reads a little of a losing response, so that the connection may be
// reused, and closes it.
func drain(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// classify sorts an attempt's answer for the overload switch and honours
// Retry-After on 429 and 503.
func (t *Transport) classify(resp *http.Response, err error, req *http.Request) outcome {
	switch {
	case err != nil:
		if req.Context().Err() != nil {
			return outcomeAbandoned
		}
		return outcomeError
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			t.policy.Pause(d)
		}
		return outcomeRejected
	case resp.StatusCode >= 500:
		return outcomeError
	}
	return outcomeOK
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s <= 0 {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	if when, err := http.ParseTime(v); err == nil {
		if d := when.Sub(now); d > 0 {
			return d, true
		}
	}
	return 0, false
}
