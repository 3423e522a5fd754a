package hedge

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestPrimaryCtx(t *testing.T) {
	type key struct{}
	tests := []struct {
		name    string
		cancel  func(c *primaryCtx, parentCancel context.CancelFunc)
		wantErr error
	}{
		{"cancelled directly", func(c *primaryCtx, _ context.CancelFunc) { c.cancel(context.Canceled) }, context.Canceled},
		{"parent cancelled", func(_ *primaryCtx, pc context.CancelFunc) { pc() }, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, pcancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
			defer pcancel()
			var c primaryCtx
			c.init(parent)
			if c.Value(key{}) != "v" {
				t.Fatal("value not inherited")
			}
			done := c.Done()
			child, ccancel := context.WithCancel(&c) // registers through AfterFunc
			defer ccancel()
			ran := make(chan struct{})
			context.AfterFunc(&c, func() { close(ran) })
			if c.Err() != nil || child.Err() != nil {
				t.Fatal("cancelled too early")
			}
			tt.cancel(&c, pcancel)
			for _, ch := range []<-chan struct{}{done, child.Done(), ran} {
				select {
				case <-ch:
				case <-time.After(2 * time.Second):
					t.Fatal("not cancelled")
				}
			}
			if !errors.Is(c.Err(), tt.wantErr) || !errors.Is(child.Err(), tt.wantErr) {
				t.Fatalf("Err = %v, child %v; want %v", c.Err(), child.Err(), tt.wantErr)
			}
		})
	}
}

func TestPrimaryCtxCancelledBeforeDone(t *testing.T) {
	var c primaryCtx
	c.init(context.Background())
	c.cancel(context.Canceled)
	c.cancel(context.DeadlineExceeded) // no effect
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err = %v", c.Err())
	}
	ran := make(chan struct{})
	context.AfterFunc(&c, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("AfterFunc on a cancelled context did not run")
	}
}

// watchedCtx is a cancellable context of its own type, so that the
// context package registers callbacks on it through its AfterFunc method,
// which counts them.
type watchedCtx struct {
	mu         sync.Mutex
	done       chan struct{}
	err        error
	fns        map[int]func()
	registered int
}

func newWatchedCtx() *watchedCtx {
	return &watchedCtx{done: make(chan struct{}), fns: map[int]func(){}}
}

func (w *watchedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *watchedCtx) Value(any) any               { return nil }
func (w *watchedCtx) Done() <-chan struct{}       { return w.done }

func (w *watchedCtx) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watchedCtx) AfterFunc(f func()) func() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.registered
	w.registered++
	w.fns[id] = f
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.fns[id]
		delete(w.fns, id)
		return ok
	}
}

func (w *watchedCtx) cancel(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	close(w.done)
	for id, f := range w.fns {
		delete(w.fns, id)
		go f()
	}
}

func (w *watchedCtx) counts() (registered, live int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.registered, len(w.fns)
}

// TestPrimaryCtxRegistersLazily checks that the primary's context costs
// its parent a registration only once someone watches it, that it still
// sees the parent end, and that it unregisters when cancelled.
func TestPrimaryCtxRegistersLazily(t *testing.T) {
	tests := []struct {
		name           string
		watch          func(c *primaryCtx)
		cancelParent   bool
		wantRegistered int
	}{
		{"nobody watches", func(*primaryCtx) {}, false, 0},
		{"nobody watches, parent ends", func(*primaryCtx) {}, true, 0},
		{"Done", func(c *primaryCtx) { c.Done() }, false, 1},
		{"Done, parent ends", func(c *primaryCtx) { c.Done() }, true, 1},
		{"derived context", func(c *primaryCtx) {
			_, cancel := context.WithCancel(c) // cancelled through c
			_ = cancel
		}, false, 1},
		{"Done twice", func(c *primaryCtx) { c.Done(); c.Done() }, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := newWatchedCtx()
			var c primaryCtx
			c.init(parent)
			tt.watch(&c)
			if got, _ := parent.counts(); got != tt.wantRegistered {
				t.Fatalf("%d registrations on the parent, want %d", got, tt.wantRegistered)
			}
			if tt.cancelParent {
				parent.cancel(context.DeadlineExceeded)
				if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Err after the parent ended = %v, want the parent's error", err)
				}
				select {
				case <-c.Done():
				case <-time.After(2 * time.Second):
					t.Fatal("Done not closed after the parent ended")
				}
			} else {
				if c.Err() != nil {
					t.Fatal("ended too early")
				}
				c.cancel(context.Canceled)
				if !errors.Is(c.Err(), context.Canceled) {
					t.Fatalf("Err = %v, want Canceled", c.Err())
				}
			}
			if _, live := parent.counts(); live != 0 {
				t.Fatalf("%d callbacks still registered on the parent", live)
			}
		})
	}
}

// TestPrimaryCtxAfterFuncParentEnded registers a callback on a context
// whose parent has ended before anyone watched it: the callback runs, but
// not on the registering goroutine, which may hold a lock the callback
// needs.
func TestPrimaryCtxAfterFuncParentEnded(t *testing.T) {
	parent := newWatchedCtx()
	parent.cancel(context.Canceled)
	var c primaryCtx
	c.init(parent)
	var mu sync.Mutex
	ran := make(chan struct{})
	mu.Lock()
	c.AfterFunc(func() {
		mu.Lock() // deadlocks if run by AfterFunc itself
		defer mu.Unlock()
		close(ran)
	})
	mu.Unlock()
	select {
	case <-ran:
	case <-time.After(2 * time.Second):
		t.Fatal("callback did not run")
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("Err = %v", c.Err())
	}
}
