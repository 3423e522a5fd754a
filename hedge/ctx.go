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
// It registers with its parent only once someone asks to be told when it
// ends (Done or AfterFunc): a base transport that never watches the
// context costs no registration. Err checks the parent itself.
//
// It implements the AfterFunc method that the context package looks for
// on custom contexts, so contexts derived from it (net/http derives one
// per request) register a callback here instead of starting a goroutine
// to watch Done.
type primaryCtx struct {
	parent context.Context

	mu         sync.Mutex
	watched    bool          // registration with the parent was claimed
	stopParent func() bool   // unregisters from the parent; nil if none
	done       chan struct{} // made on first use or on cancel
	err        error
	fn         func()   // the first registered callback
	fns        []func() // further ones
}

// closedChan is the Done channel of a context cancelled before anyone
// asked for it.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *primaryCtx) init(parent context.Context) { c.parent = parent }

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
	watch := c.claimWatchLocked()
	c.mu.Unlock()
	if watch {
		c.watchParent()
	}
	return d
}

// claimWatchLocked reports whether the caller must register c with its
// parent: true once, unless c already ended. c.mu is held.
func (c *primaryCtx) claimWatchLocked() bool {
	if c.watched || c.err != nil {
		return false
	}
	c.watched = true
	return true
}

// watchParent makes the end of the parent end c.
func (c *primaryCtx) watchParent() {
	if c.parent.Done() == nil {
		return // the parent never ends
	}
	if err := c.parent.Err(); err != nil {
		c.cancel(err)
		return
	}
	stop := context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	c.mu.Lock()
	if c.err != nil {
		// Cancelled meanwhile: cancel found no registration to undo.
		c.mu.Unlock()
		stop()
		return
	}
	c.stopParent = stop
	c.mu.Unlock()
}

// Err implements context.Context. Until someone watches c, the parent's
// end is noticed here.
func (c *primaryCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.parent.Err(); err != nil {
		c.cancel(err)
		return c.Err()
	}
	return nil
}

// String names the context, as the context package's own types do.
func (c *primaryCtx) String() string { return "hedge.primaryCtx" }

// AfterFunc arranges for f to run when c is cancelled, as
// context.AfterFunc does; the context package calls it for contexts
// derived from c. The returned stop function only reports false: a
// callback left registered runs at most once when c is cancelled, and the
// context package's callbacks are idempotent cancels.
//
// f never runs on the caller's goroutine: the context package calls
// AfterFunc while holding the lock that f takes.
func (c *primaryCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	watch := c.claimWatchLocked()
	c.mu.Unlock()
	if watch {
		c.watchParent() // may cancel c, if the parent has ended
	}
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
	fn, fns, stop := c.fn, c.fns, c.stopParent
	c.fn, c.fns, c.stopParent = nil, nil, nil
	c.mu.Unlock()
	if stop != nil {
		stop()
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
