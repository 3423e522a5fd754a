package hedge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type row struct {
	ID      int
	Attempt int32
}

// slowFirst returns an attempt function whose first call blocks until its
// context is cancelled (reporting that on cancelled) and whose later calls
// answer at once.
func slowFirst(calls *atomic.Int32, cancelled chan<- struct{}) func(context.Context) (row, error) {
	return func(ctx context.Context) (row, error) {
		n := calls.Add(1)
		if n == 1 {
			select {
			case <-ctx.Done():
				cancelled <- struct{}{}
				return row{}, ctx.Err()
			case <-time.After(5 * time.Second):
				return row{ID: 42, Attempt: n}, nil
			}
		}
		return row{ID: 42, Attempt: n}, nil
	}
}

func TestDoHedgeWins(t *testing.T) {
	p := NewPolicy(WithDelay(2 * time.Millisecond))
	var calls atomic.Int32
	cancelled := make(chan struct{}, 1)
	start := time.Now()
	got, err := Do(context.Background(), p, slowFirst(&calls, cancelled))
	if err != nil {
		t.Fatal(err)
	}
	if got != (row{ID: 42, Attempt: 2}) {
		t.Fatalf("got %+v, want the hedge's answer", got)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Do took %v: it waited for the slow primary", el)
	}
	select {
	case <-cancelled:
	case <-time.After(2 * time.Second):
		t.Fatal("the losing primary was not cancelled")
	}
	if s := p.Stats(); s.Requests != 1 || s.Hedges != 1 || s.HedgesWon != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v, want 1 request, 1 hedge, 1 won, 0 in flight", s)
	}
}

func TestDoFastPrimaryNoHedge(t *testing.T) {
	p := NewPolicy(WithDelay(50 * time.Millisecond))
	var calls atomic.Int32
	for range 20 {
		v, err := Do(context.Background(), p, func(ctx context.Context) (string, error) {
			calls.Add(1)
			return "ok", nil
		})
		if err != nil || v != "ok" {
			t.Fatalf("Do = %q, %v", v, err)
		}
	}
	if n := calls.Load(); n != 20 {
		t.Fatalf("%d calls for 20 requests", n)
	}
	if s := p.Stats(); s.Hedges != 0 || s.Requests != 20 {
		t.Fatalf("stats = %+v", s)
	}
}

var errBackend = errors.New("backend down")

func TestDoAllFail(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond), WithMaxAttempts(3))
	var calls atomic.Int32
	_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		n := calls.Add(1)
		if n == 1 {
			// Fail only once both hedges have started (and failed), however
			// slow a loaded machine makes them.
			for deadline := time.Now().Add(5 * time.Second); calls.Load() < 3 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return 0, errBackend
		}
		return 0, errors.New("other failure")
	})
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if err == nil {
		t.Fatal("no error when every attempt failed")
	}
	// The hedges failed first; the first failure is returned.
	if errors.Is(err, errBackend) {
		t.Fatalf("got the last failure %v, want the first", err)
	}
}

func TestDoFailureIsNotRetried(t *testing.T) {
	// The delay is long enough that only a retry, never a hedge racing a
	// slow scheduler, could make a second call.
	p := NewPolicy(WithDelay(100 * time.Millisecond))
	var calls atomic.Int32
	_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		calls.Add(1)
		return 0, errBackend
	})
	time.Sleep(150 * time.Millisecond)
	if !errors.Is(err, errBackend) || calls.Load() != 1 {
		t.Fatalf("err = %v after %d calls, want errBackend after 1", err, calls.Load())
	}
}

func TestDoFailedAttemptDoesNotWin(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond))
	var calls atomic.Int32
	v, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		if calls.Add(1) == 1 {
			time.Sleep(30 * time.Millisecond)
			return 7, nil
		}
		return 0, errBackend // the hedge fails first
	})
	if err != nil || v != 7 {
		t.Fatalf("Do = %v, %v; want the primary's 7", v, err)
	}
}

func TestDoParentCancelled(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Do(ctx, p, func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if s := p.Stats(); s.InFlight != 0 {
		t.Fatalf("%d hedges still counted in flight", s.InFlight)
	}
}

func TestDoNilPolicy(t *testing.T) {
	var calls atomic.Int32
	v, err := Do(context.Background(), nil, func(ctx context.Context) ([]byte, error) {
		calls.Add(1)
		time.Sleep(5 * time.Millisecond)
		return []byte("x"), nil
	})
	if err != nil || string(v) != "x" || calls.Load() != 1 {
		t.Fatalf("Do(nil policy) = %q, %v after %d calls", v, err, calls.Load())
	}
}

func TestDoBudgetDenies(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond), WithBudget(0), WithBurst(1))
	var calls atomic.Int32
	slow := func(ctx context.Context) (int, error) {
		calls.Add(1)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
			return 1, nil
		}
	}
	for range 3 {
		if _, err := Do(context.Background(), p, slow); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	if s.Hedges != 1 || s.Denied[ReasonBudget] != 2 || calls.Load() != 4 {
		t.Fatalf("stats = %+v after %d calls; want 1 hedge and 2 budget denials", s, calls.Load())
	}
}

func TestDoRejectedPauses(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond))
	_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
		return 0, &RejectedError{RetryAfter: time.Minute, Err: errBackend}
	})
	if !errors.Is(err, errBackend) {
		t.Fatalf("err = %v, want it to wrap errBackend", err)
	}
	if s := p.Stats(); s.Paused != ReasonPushback {
		t.Fatalf("paused = %v, want pushback", s.Paused)
	}
}
