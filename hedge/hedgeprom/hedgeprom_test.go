package hedgeprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/hedge"
	"github.com/gosleuth/gosleuth/hedge/hedgeprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	// The delay is long enough that the primary attempt has started before
	// the hedge even on a loaded machine: the first call of slowOnce is the
	// primary.
	p := hedge.NewPolicy(hedge.WithDelay(50*time.Millisecond), hedge.WithBudget(0), hedge.WithBurst(1))
	// The first call is slow: it is hedged and the hedge wins.
	var calls atomic.Int32
	slowOnce := func(ctx context.Context) (int, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return 1, nil
	}
	if _, err := hedge.Do(context.Background(), p, slowOnce); err != nil {
		t.Fatal(err)
	}
	// The second is slow too, but the budget is spent.
	slow := func(ctx context.Context) (int, error) {
		time.Sleep(100 * time.Millisecond)
		return 1, nil
	}
	if _, err := hedge.Do(context.Background(), p, slow); err != nil {
		t.Fatal(err)
	}
	// A rejection with Retry-After pauses hedging.
	_, err := hedge.Do(context.Background(), p, func(context.Context) (int, error) {
		return 0, &hedge.RejectedError{RetryAfter: time.Minute, Err: errors.New("busy")}
	})
	if err == nil {
		t.Fatal("no error from a rejected call")
	}

	c := hedgeprom.NewCollector(p, prometheus.Labels{"backend": "test"})
	want := `
# HELP hedge_requests_total Real requests seen by the hedging policy.
# TYPE hedge_requests_total counter
hedge_requests_total{backend="test"} 3
# HELP hedge_hedges_total Extra attempts (hedges) sent.
# TYPE hedge_hedges_total counter
hedge_hedges_total{backend="test"} 1
# HELP hedge_hedges_won_total Requests answered by an extra attempt.
# TYPE hedge_hedges_won_total counter
hedge_hedges_won_total{backend="test"} 1
# HELP hedge_denied_total Hedges not sent, by reason.
# TYPE hedge_denied_total counter
hedge_denied_total{backend="test",reason="budget"} 1
hedge_denied_total{backend="test",reason="in-flight"} 0
hedge_denied_total{backend="test",reason="low-win-rate"} 0
hedge_denied_total{backend="test",reason="not-idempotent"} 0
hedge_denied_total{backend="test",reason="not-replayable"} 0
hedge_denied_total{backend="test",reason="overload-errors"} 0
hedge_denied_total{backend="test",reason="overload-queueing"} 0
hedge_denied_total{backend="test",reason="overload-rejections"} 0
hedge_denied_total{backend="test",reason="pushback"} 0
# HELP hedge_in_flight Extra attempts running now.
# TYPE hedge_in_flight gauge
hedge_in_flight{backend="test"} 0
# HELP hedge_delay_seconds Current delay before a hedge is sent.
# TYPE hedge_delay_seconds gauge
hedge_delay_seconds{backend="test"} 0.05
# HELP hedge_paused 1 for the reason hedging is paused now, 0 for the others.
# TYPE hedge_paused gauge
hedge_paused{backend="test",reason="low-win-rate"} 0
hedge_paused{backend="test",reason="overload-errors"} 0
hedge_paused{backend="test",reason="overload-queueing"} 0
hedge_paused{backend="test",reason="overload-rejections"} 0
hedge_paused{backend="test",reason="pushback"} 1
# HELP hedge_extra_load_ratio Extra attempts sent per real request since the policy was created.
# TYPE hedge_extra_load_ratio gauge
hedge_extra_load_ratio{backend="test"} 0.3333333333333333
# HELP hedge_resent_total Attempts sent again after net/http failed them with a cancellation that was not theirs.
# TYPE hedge_resent_total counter
hedge_resent_total{backend="test"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(register(t, c)); err != nil || n != 21 {
		t.Fatalf("registered collector gathers %d series (err %v), want 21", n, err)
	}
}

// register checks that the collector's descriptions are consistent by
// registering it in a fresh registry.
func register(t *testing.T, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	if err := r.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	return r
}

func TestCollectorLowWinRate(t *testing.T) {
	p := hedge.NewPolicy(hedge.WithDelay(time.Millisecond), hedge.WithBudget(1))
	// Every attempt takes as long as any other: the hedges never win, and
	// after 20 of them hedging pauses.
	sameTime := func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
			return 1, nil
		}
	}
	for range 30 {
		if _, err := hedge.Do(context.Background(), p, sameTime); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	c := hedgeprom.NewCollector(p, nil)
	want := fmt.Sprintf(`
# HELP hedge_paused 1 for the reason hedging is paused now, 0 for the others.
# TYPE hedge_paused gauge
hedge_paused{reason="low-win-rate"} 1
hedge_paused{reason="overload-errors"} 0
hedge_paused{reason="overload-queueing"} 0
hedge_paused{reason="overload-rejections"} 0
hedge_paused{reason="pushback"} 0
# HELP hedge_denied_total Hedges not sent, by reason.
# TYPE hedge_denied_total counter
hedge_denied_total{reason="budget"} 0
hedge_denied_total{reason="in-flight"} 0
hedge_denied_total{reason="low-win-rate"} %d
hedge_denied_total{reason="not-idempotent"} 0
hedge_denied_total{reason="not-replayable"} 0
hedge_denied_total{reason="overload-errors"} 0
hedge_denied_total{reason="overload-queueing"} 0
hedge_denied_total{reason="overload-rejections"} 0
hedge_denied_total{reason="pushback"} 0
`, s.Denied[hedge.ReasonLowWinRate])
	if s.Denied[hedge.ReasonLowWinRate] == 0 {
		t.Fatalf("stats %+v: no low-win-rate denial", s)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "hedge_paused", "hedge_denied_total"); err != nil {
		t.Fatal(err)
	}
}
