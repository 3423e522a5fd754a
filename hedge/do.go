package hedge

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RejectedError marks an attempt's error as the server shedding load, like
// an HTTP 429 or 503. Return it (or an error wrapping it) from the attempt
// function of Do so that the rejection counts towards
// SwitchOff.RejectRate and RetryAfter, when positive, pauses hedging like
// Policy.Pause.
type RejectedError struct {
	// RetryAfter is how long the server asked clients to back off; zero
	// when it did not say.
	RetryAfter time.Duration
	// Err is the underlying error.
	Err error
}

// Error implements error.
func (e *RejectedError) Error() string {
	if e.Err == nil {
		return "hedge: rejected by server"
	}
	return fmt.Sprintf("hedge: rejected by server: %v", e.Err)
}

// Unwrap returns the underlying error.
func (e *RejectedError) Unwrap() error { return e.Err }

// result is what one attempt of Do returns.
type result[T any] struct {
	v   T
	err error
	i   int
}

// Do calls attempt and, if it has not returned after the policy's delay,
// calls it again concurrently (up to the policy's maximum number of
// attempts, each one delay after the previous one), as long as the
// policy's budget, in-flight cap and overload switch allow. It returns the
// first result whose error is nil and cancels the context of every other
// attempt at once; when every attempt fails it returns the first error.
// A failure does not start another attempt early: Do hedges, it does not
// retry.
//
// Each attempt gets its own context, derived from ctx. The winner's
// context is cancelled when Do returns, so attempt must finish with
// anything that depends on it (such as reading an HTTP response body)
// before it returns; for HTTP use Transport, which keeps the winner alive
// until the body is closed. Values returned by losing attempts are
// dropped. Errors from attempt are returned as they are; when ctx ends
// first, Do returns ctx's error without waiting for running attempts.
//
// attempt must be safe to call concurrently and to repeat. A nil p calls
// attempt once, without hedging.
func Do[T any](ctx context.Context, p *Policy, attempt func(context.Context) (T, error)) (T, error) {
	if p == nil || p.cfg.maxAttempts < 2 {
		if p != nil {
			p.begin()
		}
		return attempt(ctx)
	}
	p.begin()

	var (
		results = make(chan result[T], p.cfg.maxAttempts)
		cancels [MaxAttemptsLimit]context.CancelFunc
		starts  [MaxAttemptsLimit]time.Time
		started [MaxAttemptsLimit]bool
		done    [MaxAttemptsLimit]bool
	)
	launch := func(i int) {
		actx, cancel := context.WithCancel(ctx)
		cancels[i], starts[i], started[i] = cancel, time.Now(), true
		go func() {
			v, err := attempt(actx)
			results <- result[T]{v: v, err: err, i: i}
		}()
	}
	next, pending := 1, 1 // next: the attempt slot the timer considers next
	hedges := 0           // extra attempts launched
	launch(0)

	timer := time.NewTimer(p.Delay())
	defer timer.Stop()
	timerC := timer.C

	// finish cancels every attempt still running, records it as cut short
	// and releases the in-flight slots of the extra ones.
	finish := func(now time.Time, o outcome) {
		for i := range next {
			if !started[i] {
				continue
			}
			cancels[i]()
			if !done[i] {
				p.record(now, now.Sub(starts[i]), i == 0, o)
				if i > 0 {
					p.release()
				}
			}
		}
	}

	var firstErr error
	for {
		select {
		case r := <-results:
			now := time.Now()
			done[r.i] = true
			pending--
			if r.i > 0 {
				p.release()
			}
			o := classifyErr(r.err, ctx)
			p.record(now, now.Sub(starts[r.i]), r.i == 0, o)
			if r.err == nil {
				if hedges > 0 {
					p.hedged(hedges, r.i > 0, false)
				}
				finish(now, outcomeSuperseded)
				return r.v, nil
			}
			if rej := (*RejectedError)(nil); errors.As(r.err, &rej) && rej.RetryAfter > 0 {
				p.Pause(rej.RetryAfter)
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if pending == 0 {
				if hedges > 0 {
					p.hedged(hedges, false, ctx.Err() != nil)
				}
				finish(now, outcomeSuperseded)
				var zero T
				return zero, firstErr
			}
		case <-timerC:
			// Each extra slot gets one chance: a denied hedge is not
			// asked for again at every tick.
			if p.admit() {
				launch(next)
				pending++
				hedges++
			}
			next++
			if next < p.cfg.maxAttempts {
				timer.Reset(p.Delay())
			} else {
				timerC = nil
			}
		case <-ctx.Done():
			finish(time.Now(), outcomeAbandoned)
			var zero T
			return zero, ctx.Err()
		}
	}
}

// classifyErr sorts an attempt's error for the overload switch.
func classifyErr(err error, parent context.Context) outcome {
	switch {
	case err == nil:
		return outcomeOK
	case parent.Err() != nil:
		return outcomeAbandoned
	case errors.As(err, new(*RejectedError)):
		return outcomeRejected
	default:
		return outcomeError
	}
}
