package hedge

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// opportunities asks p for n hedges, as n slow requests would, and returns
// how many it let through.
func opportunities(p *Policy, n int) int {
	sent := 0
	for range n {
		if p.admit() {
			sent++
			p.release()
		}
	}
	return sent
}

// TestWinGate drives the low win rate switch through its states: a window
// of 20 losing hedges pauses hedging, probes go out one in 10, 20, 40 and
// then 80 opportunities while they keep losing, and a window of winning
// probes resumes hedging. Probes are not spaced in time here (see
// TestWinGateProbeInterval).
func TestWinGate(t *testing.T) {
	type step struct {
		hedges, wins int    // hedged requests to record, one hedge each
		paused       bool   // paused after recording them
		probes       [2]int // range of hedges let through out of 400 opportunities
	}
	tests := []struct {
		name  string
		rate  float64
		steps []step
	}{
		{"winning hedges keep it open", 0.1, []step{
			{100, 50, false, [2]int{400, 400}},
			{20, 2, false, [2]int{400, 400}}, // exactly the minimum share
		}},
		{"losing hedges pause, probes back off, winning probes resume", 0.1, []step{
			{20, 1, true, [2]int{40, 40}},
			{20, 0, true, [2]int{20, 20}},
			{20, 1, true, [2]int{10, 10}},
			{20, 0, true, [2]int{5, 5}},
			{20, 0, true, [2]int{5, 5}}, // the probe share stops falling
			{20, 10, false, [2]int{400, 400}},
		}},
		{"two winning probes resume at once", 0.1, []step{
			{20, 0, true, [2]int{40, 40}},
			{1, 1, true, [2]int{40, 40}},
			{1, 1, false, [2]int{400, 400}},
		}},
		{"a window is judged only once full", 0.1, []step{
			{19, 0, false, [2]int{400, 400}},
			{1, 0, true, [2]int{40, 40}},
		}},
		{"a higher threshold", 0.5, []step{
			{20, 9, true, [2]int{40, 40}},
			{20, 10, false, [2]int{400, 400}},
		}},
		{"MinWinRate 0 disables it", 0, []step{{100, 0, false, [2]int{400, 400}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			so := DefaultSwitchOff
			so.MinWinRate = tt.rate
			p := newPolicy(testConfig(WithSwitchOff(so), WithBudget(4), WithBurst(1000), WithMaxInFlight(1000)))
			for i, st := range tt.steps {
				for j := range st.hedges { // wins spread evenly
					p.hedged(1, j*st.wins/st.hedges < (j+1)*st.wins/st.hedges, false)
				}
				want := Reason(-1)
				if st.paused {
					want = ReasonLowWinRate
				}
				if got := p.Stats().Paused; got != want {
					t.Fatalf("step %d: paused = %v, want %v", i, got, want)
				}
				denied0 := p.Stats().Denied[ReasonLowWinRate]
				for range 400 {
					p.begin() // keep the budget topped up
				}
				sent := opportunities(p, 400)
				if sent < st.probes[0] || sent > st.probes[1] {
					t.Fatalf("step %d: %d of 400 hedges let through, want [%d, %d]", i, sent, st.probes[0], st.probes[1])
				}
				if d := p.Stats().Denied[ReasonLowWinRate] - denied0; d != uint64(400-sent) {
					t.Fatalf("step %d: %d low-win-rate denials, want %d", i, d, 400-sent)
				}
			}
		})
	}
}

// TestWinGateProbeInterval checks that probes are spaced in time as well
// as in opportunities, so that a busy client sends few probes.
func TestWinGateProbeInterval(t *testing.T) {
	tests := []struct {
		name       string
		level      int           // losing windows recorded
		step, span time.Duration // one opportunity per step, for span
		want       int
	}{
		{"busy, level 1: one a second", 1, 10 * time.Millisecond, 10 * time.Second, 10},
		{"busy, level 2: one in two seconds", 2, 10 * time.Millisecond, 10 * time.Second, 5},
		{"busy, level 9 stops at one in 8 s", 9, 10 * time.Millisecond, 40 * time.Second, 5},
		{"quiet, level 1: one in 10 opportunities", 1, 5 * time.Second, 100 * time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g winGate
			for range tt.level * winWindow {
				g.record(1, false, 0.1)
			}
			start := time.Unix(0, g.lastProbe.Load())
			probes := 0
			for k := int64(1); k*int64(tt.step) <= int64(tt.span); k++ {
				if g.probe(start.Add(time.Duration(k)*tt.step), time.Second) {
					probes++
				}
			}
			if probes != tt.want {
				t.Fatalf("%d probes, want %d", probes, tt.want)
			}
		})
	}
}

func TestWinGateIgnoresAbandoned(t *testing.T) {
	p := newPolicy(testConfig())
	for range 40 {
		p.hedged(1, false, true)
	}
	if s := p.Stats(); s.Paused != -1 {
		t.Fatalf("paused = %v after requests the caller gave up on, want none", s.Paused)
	}
}

// TestLowWinRateSwitchOff runs real traffic against a server where every
// attempt takes the same time, so that a hedge sent 2 ms after its primary
// can never answer first, and against one with a heavy tail, where every
// hedge wins.
func TestLowWinRateSwitchOff(t *testing.T) {
	sameTime := func(s *testServer, _ int64, r *http.Request) { s.wait(r, 15*time.Millisecond) }
	heavyTail := func(s *testServer, n int64, r *http.Request) {
		if n%4 == 1 {
			s.wait(r, 40*time.Millisecond) // or until the hedge wins and cancels it
		}
	}
	type phase struct {
		n          int // sequential requests
		handle     func(s *testServer, n int64, r *http.Request)
		wantPaused bool // at the end of the phase
		maxHedges  uint64
		minWon     uint64
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		// On a loaded machine a primary may now and then lose to its hedge
		// by chance, so a first run of 20 hedges may not trip the switch:
		// allow a second one.
		{"same latency for every attempt", []phase{{80, sameTime, true, 40 + (80-40)/probeEvery + 2, 0}}},
		{"heavy tail", []phase{{100, heavyTail, false, 100, 20}}},
		// Probes go out one opportunity in ten; two that win resume
		// hedging.
		{"same latency, then a heavy tail", []phase{
			{80, sameTime, true, 40 + (80-40)/probeEvery + 2, 0},
			{160, heavyTail, false, 160, 10},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var handle atomic.Pointer[func(*testServer, int64, *http.Request)]
			s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
				(*handle.Load())(s, n, r)
			})
			// The budget, the in-flight cap and the latency shift are out of
			// the way, and probes are not spaced in time.
			so := DefaultSwitchOff
			so.LatencyShift = 0
			cfg := defaultConfig()
			for _, o := range []Option{WithDelay(5 * time.Millisecond), WithBudget(1), WithMaxInFlight(100), WithSwitchOff(so)} {
				o(&cfg)
			}
			cfg.window.probeInterval = 0
			c, ht := newClient(t, WithPolicy(newPolicy(cfg)))
			for i, ph := range tt.phases {
				handle.Store(&ph.handle)
				before := ht.Stats()
				phaseRun(t, c, ht, s.URL, ph.n)
				st := ht.Stats()
				hedges, won := st.Hedges-before.Hedges, st.HedgesWon-before.HedgesWon
				t.Logf("phase %d: %d hedges, %d won, stats %+v", i, hedges, won, st)
				if paused := st.Paused == ReasonLowWinRate; paused != ph.wantPaused {
					t.Fatalf("phase %d: paused = %v, want low-win-rate pause %v", i, st.Paused, ph.wantPaused)
				}
				if i == 0 && (st.Denied[ReasonLowWinRate] > 0) != ph.wantPaused {
					t.Fatalf("phase %d: %d low-win-rate denials, want some: %v", i, st.Denied[ReasonLowWinRate], ph.wantPaused)
				}
				if hedges > ph.maxHedges || won < ph.minWon {
					t.Fatalf("phase %d: %d hedges, %d won; want at most %d hedges and at least %d won", i, hedges, won, ph.maxHedges, ph.minWon)
				}
				waitFor(t, "the hedges' slots", func() bool { return ht.Stats().InFlight == 0 })
			}
		})
	}
}

func TestDoLowWinRate(t *testing.T) {
	p := NewPolicy(WithDelay(time.Millisecond), WithBudget(1), WithMaxInFlight(100))
	var calls atomic.Int32
	sameTime := func(ctx context.Context) (int, error) {
		calls.Add(1)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(6 * time.Millisecond):
			return 1, nil
		}
	}
	const n = 60
	for range n {
		if _, err := Do(context.Background(), p, sameTime); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	if s.Paused != ReasonLowWinRate || s.Denied[ReasonLowWinRate] == 0 || s.Hedges > 20+(n-20)/probeEvery+2 {
		t.Fatalf("stats %+v: want a low-win-rate pause after about 20 hedges", s)
	}
}
