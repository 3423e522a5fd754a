package hedge

import (
	"context"
	"errors"
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
