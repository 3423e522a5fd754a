package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// primaryCtx is the context of a Transport's primary attempt. It lives
// inside the call, so the common case (no hedge fires) allocates no
// context of its own; it behaves as context.WithCancel(parent) would.
//
// It implements the AfterFunc method that the context package looks for
// on custom contexts, so contexts derived from it (net/http derives one
// per request) register a callback here instead of starting a goroutine
// to watch Done.
type primaryCtx struct {
	parent     context.Context
	stopParent func() bool // unregisters from parent; nil if parent never ends

	mu   sync.Mutex
	done chan struct{} // made on first use or on cancel
	err  error
	fn   func()   // the first registered callback
	fns  []func() // further ones
}

// closedChan is the Done channel of a context cancelled before anyone
// asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *primaryCtx) init(parent context.Context) {
	c.parent = parent
	if parent.Done() != nil {
		c.stopParent = context.AfterFunc(parent, func() { c.cancel(parent.Err()) })
	}
}

// Deadline implements context.Context.
func (c *primaryCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value implements context.Context.
func (c *primaryCtx) Value(key any) any { return c.parent.Value(key) }

// Done implements context.Context.
func (c *primaryCtx) Done() <-chan struct{} {
	c.mu.Lock()
	if c.done == nil {
		c.done = make(chan struct{})
	}
	d := c.done
	c.mu.Unlock()
	return d
}

// Err implements context.Context.
func (c *primaryCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	return err
}

// String names the context, as the context package's own types do.
func (c *primaryCtx) String() string { return "hedge.primaryCtx" }

// AfterFunc arranges for f to run when c is cancelled, as
// context.AfterFunc does; the context package calls it for contexts
// derived from c. The returned stop function only reports false: a
// callback left registered runs at most once when c is cancelled, and the
// context package's callbacks are idempotent cancels.
func (c *primaryCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		go f()
		return stopNothing
	}
	if c.fn == nil {
		c.fn = f
	} else {
		c.fns = append(c.fns, f)
	}
	c.mu.Unlock()
	return stopNothing
}

func stopNothing() bool { return false }

// cancel ends c with err, once.
func (c *primaryCtx) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.done == nil {
		c.done = closedChan
	} else {
		close(c.done)
	}
	fn, fns := c.fn, c.fns
	c.fn, c.fns = nil, nil
	c.mu.Unlock()
	if c.stopParent != nil {
		c.stopParent()
	}
	if fn != nil {
		fn()
	}
	for _, f := range fns {
		f()
	}
}

// hedgeTimer is a reusable timer whose callback fires the hedge of the
// call it is armed for. Pooling it saves the timer and its callback
// closure on every request: only a timer stopped before it fired goes
// back to the pool, so a callback never runs for a call it was not armed
// for.
type hedgeTimer struct {
	t *time.Timer
	c atomic.Pointer[call]
}

var timerPool = sync.Pool{New: func() any {
	h := &hedgeTimer{}
	h.t = time.AfterFunc(time.Hour, h.fire)
	h.t.Stop()
	return h
}}

func (h *hedgeTimer) fire() {
	if c := h.c.Load(); c != nil {
		c.fire()
	}
}

// arm starts a pooled timer for c.
func armTimer(c *call, d time.Duration) *hedgeTimer {
	h := timerPool.Get().(*hedgeTimer)
	h.c.Store(c)
	h.t.Reset(d)
	return h
}

// disarm stops h and returns it to the pool if its callback had not
// started.
func (h *hedgeTimer) disarm() {
	if h.t.Stop() {
		h.c.Store(nil)
		timerPool.Put(h)
	}
}
