package hedge

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	tests := []struct {
		d     time.Duration
		upper time.Duration // top of the bucket d falls in
	}{
		{0, time.Microsecond - 1},
		{999 * time.Nanosecond, time.Microsecond - 1},
		{5 * time.Microsecond, 6*time.Microsecond - 1},
		{31 * time.Microsecond, 32*time.Microsecond - 1},
		{32 * time.Microsecond, 34*time.Microsecond - 1},
		{time.Millisecond, 1024*time.Microsecond - 1},
		{1500 * time.Microsecond, 1536*time.Microsecond - 1},
		{time.Second, 1015808*time.Microsecond - 1},
		{100 * time.Hour, bucketUpper(numBuckets - 1)},
	}
	for _, tt := range tests {
		got := bucketUpper(bucketOf(tt.d))
		if got != tt.upper {
			t.Errorf("bucketUpper(bucketOf(%v)) = %v, want %v", tt.d, got, tt.upper)
		}
		if tt.d < 100*time.Hour && got < tt.d {
			t.Errorf("bucket of %v tops out below it, at %v", tt.d, got)
		}
	}
	// Every bucket is at most 1/16 wide relative to its lower edge, and
	// buckets are contiguous.
	prev := time.Duration(-1)
	for i := range numBuckets - 1 {
		up := bucketUpper(i)
		if up <= prev {
			t.Fatalf("bucket %d top %v not above bucket %d top %v", i, up, i-1, prev)
		}
		if bucketOf(up) != i || bucketOf(up+1) != i+1 {
			t.Fatalf("bucket %d: edges do not map back (top %v)", i, up)
		}
		if lo := prev + 1; lo >= 16*time.Microsecond && float64(up-lo) > float64(lo)/16 {
			t.Fatalf("bucket %d [%v, %v] wider than 1/16", i, lo, up)
		}
		prev = up
	}
}

func TestQuantile(t *testing.T) {
	uniform := func(h *histogram) {
		for i := 1; i <= 1000; i++ {
			h.record(time.Duration(i) * time.Millisecond / 10) // 0.1 .. 100 ms
		}
	}
	tests := []struct {
		name string
		fill func(a, b *histogram)
		q    float64
		want time.Duration
		ok   bool
	}{
		{"empty", func(a, b *histogram) {}, 0.5, 0, false},
		{"one value", func(a, b *histogram) { a.record(3 * time.Millisecond) }, 0.99, 3 * time.Millisecond, true},
		{"uniform median", func(a, b *histogram) { uniform(a) }, 0.5, 50 * time.Millisecond, true},
		{"uniform p95", func(a, b *histogram) { uniform(a) }, 0.95, 95 * time.Millisecond, true},
		{"split over windows", func(a, b *histogram) {
			for range 90 {
				a.record(time.Millisecond)
			}
			for range 10 {
				b.record(40 * time.Millisecond)
			}
		}, 0.95, 40 * time.Millisecond, true},
		{"tail below quantile", func(a, b *histogram) {
			for range 970 {
				a.record(time.Millisecond)
			}
			for range 30 {
				b.record(40 * time.Millisecond)
			}
		}, 0.95, time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b histogram
			tt.fill(&a, &b)
			got, ok := quantile2(&a, &b, tt.q)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			// Buckets are 1/16 wide and the top of the bucket is reported.
			if got < tt.want || float64(got) > float64(tt.want)*(1+1.0/16)+float64(time.Microsecond) {
				t.Errorf("quantile2(q=%v) = %v, want %v (+6.25%%)", tt.q, got, tt.want)
			}
		})
	}
}

// testConfig returns a configuration with short windows, so tests need
// less traffic.
func testConfig(opts ...Option) config {
	cfg := defaultConfig()
	cfg.window = windowing{refreshEvery: 0, minAge: 0, minCount: 100, maxAge: time.Hour}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// feed records n primaries with latencies drawn from gen, one every step.
func feed(p *Policy, now *time.Time, step time.Duration, n int, gen func() (time.Duration, outcome)) {
	for range n {
		d, o := gen()
		*now = now.Add(step)
		p.record(*now, d, true, o)
	}
}

func TestAdaptiveDelay(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	heavyTail := func() (time.Duration, outcome) {
		d := time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
		if rng.Float64() < 0.03 {
			d += 20*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond)))
		}
		return d, outcomeOK
	}
	tests := []struct {
		name     string
		opts     []Option
		n        int
		gen      func() (time.Duration, outcome)
		lo, hi   time.Duration
		wantWarm bool
	}{
		{"cold uses the initial delay", nil, 10, heavyTail, DefaultInitialDelay, DefaultInitialDelay, false},
		{"cold honours WithInitialDelay", []Option{WithInitialDelay(3 * time.Millisecond)}, 10, heavyTail,
			3 * time.Millisecond, 3 * time.Millisecond, false},
		// 1-2 ms uniform plus a 3% tail: P95 is ~1.95 ms (in the body),
		// P99 in the tail (>= 21 ms).
		{"p95 of a heavy tail", []Option{WithPercentileDelay(0.95)}, 5000, heavyTail,
			1800 * time.Microsecond, 2200 * time.Microsecond, true},
		{"p99 lands in the tail", []Option{WithPercentileDelay(0.99)}, 5000, heavyTail,
			21 * time.Millisecond, 60 * time.Millisecond, true},
		{"floor", []Option{WithPercentileDelay(0.5), WithMinDelay(5 * time.Millisecond)}, 1000, heavyTail,
			5 * time.Millisecond, 5 * time.Millisecond, true},
		{"fixed delay ignores latencies", []Option{WithDelay(7 * time.Millisecond)}, 1000, heavyTail,
			7 * time.Millisecond, 7 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(tt.opts...)
			cfg.switchOff = SwitchOff{}
			p := newPolicy(cfg)
			now := time.Now()
			feed(p, &now, time.Millisecond, tt.n, tt.gen)
			if d := p.Delay(); d < tt.lo || d > tt.hi {
				t.Errorf("delay after %d samples = %v, want in [%v, %v]", tt.n, d, tt.lo, tt.hi)
			}
		})
	}
}

// TestSupersededAttemptsCounted checks that attempts cut short are recorded:
// if only the answers that completed were kept, the estimate would fall to
// the fast ones.
func TestSupersededAttemptsCounted(t *testing.T) {
	p := newPolicy(testConfig(WithPercentileDelay(0.9)))
	now := time.Now()
	// 80% fast answers, 20% superseded after 30 ms.
	i := 0
	feed(p, &now, time.Millisecond, 2000, func() (time.Duration, outcome) {
		i++
		if i%5 == 0 {
			return 30 * time.Millisecond, outcomeSuperseded
		}
		return time.Millisecond, outcomeOK
	})
	if d := p.Delay(); d < 30*time.Millisecond {
		t.Errorf("P90 with 20%% of attempts cut at 30 ms = %v, want >= 30ms", d)
	}
}

func TestSwitchOff(t *testing.T) {
	ok := func(d time.Duration) func() (time.Duration, outcome) {
		return func() (time.Duration, outcome) { return d, outcomeOK }
	}
	every := func(n int, bad outcome, d time.Duration) func() (time.Duration, outcome) {
		i := 0
		return func() (time.Duration, outcome) {
			i++
			if i%n == 0 {
				return d, bad
			}
			return d, outcomeOK
		}
	}
	type phase struct {
		n    int
		gen  func() (time.Duration, outcome)
		want Reason // -1: not paused
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"healthy", []phase{{1000, ok(time.Millisecond), -1}}},
		{"heavy tail is not queueing", []phase{
			{500, ok(time.Millisecond), -1},
			{1000, func() (time.Duration, outcome) {
				if rand.IntN(20) == 0 {
					return 50 * time.Millisecond, outcomeOK
				}
				return time.Millisecond, outcomeOK
			}, -1},
		}},
		{"503s pause then resume", []phase{
			{300, ok(time.Millisecond), -1},
			{300, every(10, outcomeRejected, time.Millisecond), ReasonRejections},
			{300, ok(time.Millisecond), -1},
		}},
		{"errors pause then resume", []phase{
			{300, ok(time.Millisecond), -1},
			{300, every(5, outcomeError, time.Millisecond), ReasonErrors},
			{300, ok(time.Millisecond), -1},
		}},
		{"1% errors do not pause", []phase{{1000, every(100, outcomeError, time.Millisecond), -1}}},
		{"everything slower is queueing", []phase{
			{300, ok(time.Millisecond), -1},
			{300, ok(5 * time.Millisecond), ReasonQueueing},
			{300, ok(time.Millisecond), -1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPolicy(testConfig())
			now := time.Now()
			for i, ph := range tt.phases {
				feed(p, &now, time.Millisecond, ph.n, ph.gen)
				if got := p.pausedReason(now); got != ph.want {
					t.Fatalf("after phase %d: paused = %v, want %v", i, got, ph.want)
				}
			}
		})
	}
}

func TestSwitchOffAcceptsLastingShift(t *testing.T) {
	cfg := testConfig(WithSwitchOff(SwitchOff{LatencyShift: 2, MaxPause: time.Second}))
	p := newPolicy(cfg)
	now := time.Now()
	feed(p, &now, time.Millisecond, 300, func() (time.Duration, outcome) { return time.Millisecond, outcomeOK })
	slow := func() (time.Duration, outcome) { return 10 * time.Millisecond, outcomeOK }
	feed(p, &now, time.Millisecond, 200, slow)
	if got := p.pausedReason(now); got != ReasonQueueing {
		t.Fatalf("paused = %v, want %v", got, ReasonQueueing)
	}
	// After MaxPause the new level becomes the baseline.
	feed(p, &now, 10*time.Millisecond, 300, slow)
	if got := p.pausedReason(now); got != -1 {
		t.Fatalf("after a shift longer than MaxPause: paused = %v, want none", got)
	}
}

func TestPause(t *testing.T) {
	p := NewPolicy()
	p.Pause(time.Hour) // capped at five minutes
	now := time.Now()
	if got := p.pausedReason(now); got != ReasonPushback {
		t.Fatalf("paused = %v, want %v", got, ReasonPushback)
	}
	if got := p.pausedReason(now.Add(maxPushback + time.Second)); got != -1 {
		t.Fatalf("paused after the cap = %v, want none", got)
	}
	if p.admit() {
		t.Fatal("admit during a pause")
	}
	if s := p.Stats(); s.Denied[ReasonPushback] != 1 || s.Hedges != 0 {
		t.Fatalf("stats = %+v, want one pushback denial and no hedge", s)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
	}
	for _, tt := range tests {
		got, ok := retryAfter(tt.v, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}
