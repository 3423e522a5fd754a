package hedge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testServer is a loopback server that counts what it received and how
// many handlers saw their request cancelled.
type testServer struct {
	*httptest.Server
	received  atomic.Int64
	cancelled atomic.Int64
}

// newTestServer starts a server whose handler gets the 1-based arrival
// number of each request.
func newTestServer(t *testing.T, h func(s *testServer, n int64, w http.ResponseWriter, r *http.Request)) *testServer {
	t.Helper()
	s := &testServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(s, s.received.Add(1), w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// wait sleeps for d or until the request is cancelled, and reports whether
// it was cancelled.
func (s *testServer) wait(r *http.Request, d time.Duration) bool {
	select {
	case <-r.Context().Done():
		s.cancelled.Add(1)
		return true
	case <-time.After(d):
		return false
	}
}

// newClient returns a client hedging through a fresh http.Transport that is
// closed when the test ends.
func newClient(t *testing.T, opts ...Option) (*http.Client, *Transport) {
	t.Helper()
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(base.CloseIdleConnections)
	ht := NewTransport(base, opts...)
	return &http.Client{Transport: ht, Timeout: 10 * time.Second}, ht
}

// pattern is a body whose every byte depends on its offset.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// writeSlowly sends body in chunks, flushing each, so that most of it is
// still on the wire when the client's RoundTrip returns.
func writeSlowly(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	for len(body) > 0 {
		n := min(len(body), 64<<10)
		_, _ = w.Write(body[:n])
		w.(http.Flusher).Flush()
		body = body[n:]
		time.Sleep(2 * time.Millisecond)
	}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, b
}

// waitFor polls cond for up to two seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWinnerBodyReadable(t *testing.T) {
	body := pattern(1 << 20)
	tests := []struct {
		name      string
		slowHedge bool // the hedge (else the primary) blocks until cancelled
		wantWon   uint64
	}{
		{"hedge wins", false, 1},
		{"primary wins", true, 0},
	}
	// Hedges carry a header, so the server tells them from the primary
	// whatever order they arrive in on a loaded machine.
	markHedges := WithHedgeTarget(func(req *http.Request, attempt int) *http.Request {
		req.Header.Set("X-Test-Hedge", strconv.Itoa(attempt))
		return req
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
				hedge := r.Header.Get("X-Test-Hedge") != ""
				if hedge == tt.slowHedge {
					s.wait(r, 5*time.Second)
					return
				}
				if !hedge {
					time.Sleep(15 * time.Millisecond) // let the hedge start
				}
				writeSlowly(w, body)
			})
			c, ht := newClient(t, WithDelay(5*time.Millisecond), markHedges)
			resp, got := get(t, c, s.URL)
			if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
				t.Fatalf("status %d, %d bytes read; want 200 and the full %d bytes", resp.StatusCode, len(got), len(body))
			}
			waitFor(t, "the loser's cancellation", func() bool { return s.cancelled.Load() == 1 })
			st := ht.Stats()
			if st.Hedges != 1 || st.HedgesWon != tt.wantWon || s.received.Load() != 2 {
				t.Fatalf("stats %+v, server received %d; want 1 hedge, %d won, 2 received", st, s.received.Load(), tt.wantWon)
			}
			waitFor(t, "the hedge's slot", func() bool { return ht.Stats().InFlight == 0 })
		})
	}
}

func TestFastPathBodyReadable(t *testing.T) {
	body := pattern(1 << 20)
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		writeSlowly(w, body)
	})
	c, ht := newClient(t, WithDelay(time.Second))
	for range 3 {
		if _, got := get(t, c, s.URL); !bytes.Equal(got, body) {
			t.Fatalf("read %d bytes, want %d", len(got), len(body))
		}
	}
	if st := ht.Stats(); st.Hedges != 0 || st.Requests != 3 {
		t.Fatalf("stats %+v, want 3 requests and no hedge", st)
	}
}

func TestFailureDoesNotWin(t *testing.T) {
	tests := []struct {
		name       string
		primary    int // status of the primary, sent after 30 ms
		hedge      int // status of the hedge, sent at once
		wantStatus int
	}{
		{"hedge 500, primary 200", 200, 500, 200},
		{"hedge 503, primary 200", 200, 503, 200},
		{"both fail: first failure", 502, 500, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					time.Sleep(30 * time.Millisecond)
					w.WriteHeader(tt.primary)
					return
				}
				w.WriteHeader(tt.hedge)
			})
			c, _ := newClient(t, WithDelay(2*time.Millisecond))
			if resp, _ := get(t, c, s.URL); resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
		})
	}
}

// TestBudgetUnderLoad sends sustained concurrent traffic where a fifth of
// the requests are slow, far more than the budget can hedge.
func TestBudgetUnderLoad(t *testing.T) {
	const (
		workers = 8
		per     = 250
		ratio   = 0.05
		burst   = 5
	)
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		if n%5 == 0 {
			s.wait(r, 10*time.Millisecond)
		}
	})
	c, ht := newClient(t, WithDelay(time.Millisecond), WithBudget(ratio), WithBurst(burst), WithMaxInFlight(100),
		WithSwitchOff(SwitchOff{}))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range per {
				resp, err := c.Get(s.URL)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	const requests = workers * per
	bound := int64(ratio*requests) + burst
	st := ht.Stats()
	extra := s.received.Load() - requests
	if extra > bound || int64(st.Hedges) > bound {
		t.Fatalf("%d extra requests at the server, %d hedges counted, for %d requests: budget %d", extra, st.Hedges, requests, bound)
	}
	// The budget was the binding limit: it was nearly used up, and hedges
	// were refused for it.
	if int64(st.Hedges) < bound/2 || st.Denied[ReasonBudget] == 0 {
		t.Fatalf("stats %+v: want the budget spent and budget denials", st)
	}
	t.Logf("%d requests, %d hedges (%d won), budget denials %d, server extra %d", requests, st.Hedges, st.HedgesWon, st.Denied[ReasonBudget], extra)
}

// testPolicy is a Policy with short latency windows, so that the overload
// switch reacts within a few hundred requests.
func testPolicy(opts ...Option) *Policy {
	cfg := testConfig(opts...)
	cfg.window.minCount = 60
	return newPolicy(cfg)
}

// phaseRun sends n sequential GETs and returns how many hedges they sent.
func phaseRun(t *testing.T, c *http.Client, ht *Transport, u string, n int) uint64 {
	t.Helper()
	before := ht.Stats().Hedges
	for range n {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return ht.Stats().Hedges - before
}

func TestSwitchOffUnderOverload(t *testing.T) {
	type phase struct {
		n          int
		behave     func(n int64) (status int, delay time.Duration)
		paused     Reason // at the end of the phase
		maxLate    uint64 // hedges allowed in the second half of the phase
		minLate    uint64
		denyDuring Reason // a denial reason that must grow in the phase; -1 none
	}
	healthy := func(n int64) (int, time.Duration) {
		if n%5 == 0 {
			return 200, 5 * time.Millisecond // a tail worth hedging
		}
		return 200, 0
	}
	tests := []struct {
		name   string
		phases []phase
	}{
		{"503s", []phase{
			{150, healthy, -1, 1000, 1, -1},
			{200, func(n int64) (int, time.Duration) {
				if n%3 == 0 {
					return 503, 0
				}
				return 200, 5 * time.Millisecond
			}, ReasonRejections, 0, 0, ReasonRejections},
			{200, healthy, -1, 1000, 1, -1},
		}},
		{"everything slower", []phase{
			// A request may still pass the 3 ms delay now and then, more
			// often on a loaded machine: this phase only sets the baseline.
			{150, func(n int64) (int, time.Duration) { return 200, time.Millisecond }, -1, 30, 0, -1},
			{200, func(n int64) (int, time.Duration) { return 200, 8 * time.Millisecond }, ReasonQueueing, 0, 0, ReasonQueueing},
			{200, healthy, -1, 1000, 1, -1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var behave atomic.Pointer[func(int64) (int, time.Duration)]
			s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
				status, d := (*behave.Load())(n)
				if d > 0 && s.wait(r, d) {
					return
				}
				w.WriteHeader(status)
			})
			// Delay 3 ms: every slow request would be hedged if allowed;
			// the budget is out of the way, and so is the low win rate
			// switch (hedges lose while everything is slower, before the
			// shift is seen; TestLowWinRateSwitchOff covers it).
			so := DefaultSwitchOff
			so.MinWinRate = 0
			p := testPolicy(WithDelay(3*time.Millisecond), WithBudget(1), WithMaxInFlight(100), WithSwitchOff(so))
			c, ht := newClient(t, WithPolicy(p))
			for i, ph := range tt.phases {
				behave.Store(&ph.behave)
				var denied0 uint64
				if ph.denyDuring >= 0 {
					denied0 = ht.Stats().Denied[ph.denyDuring]
				}
				phaseRun(t, c, ht, s.URL, ph.n/2)
				late := phaseRun(t, c, ht, s.URL, ph.n-ph.n/2)
				st := ht.Stats()
				if late > ph.maxLate || late < ph.minLate {
					t.Fatalf("phase %d: %d hedges in its second half, want [%d, %d]; stats %+v", i, late, ph.minLate, ph.maxLate, st)
				}
				if st.Paused != ph.paused {
					t.Fatalf("phase %d: paused = %v, want %v", i, st.Paused, ph.paused)
				}
				if ph.denyDuring >= 0 && st.Denied[ph.denyDuring] == denied0 {
					t.Fatalf("phase %d: no %v denial", i, ph.denyDuring)
				}
			}
		})
	}
}

func TestRetryAfterPauses(t *testing.T) {
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.wait(r, 10*time.Millisecond)
	})
	c, ht := newClient(t, WithDelay(time.Millisecond))
	// On a loaded machine the 503 may take longer than the 1 ms delay: then
	// a hedge goes out and wins with a 200. Either way the Retry-After on the
	// primary's answer pauses hedging.
	get(t, c, s.URL)
	before := ht.Stats()
	if before.Paused != ReasonPushback {
		t.Fatalf("after a 503 with Retry-After: stats %+v, want a pushback pause", before)
	}
	get(t, c, s.URL) // slow, but hedging is paused
	st := ht.Stats()
	if st.Paused != ReasonPushback || st.Hedges != before.Hedges || st.Denied[ReasonPushback] != 1 ||
		s.received.Load() != 2+int64(before.Hedges) {
		t.Fatalf("stats %+v, server received %d; want a pushback pause and no new hedge", st, s.received.Load())
	}
}

func TestIdempotency(t *testing.T) {
	const payload = "the request body, sent twice when hedged"
	tests := []struct {
		name       string
		req        func(u string) *http.Request
		wantHedged bool
		denied     Reason
	}{
		{"GET", func(u string) *http.Request { return mustReq(http.MethodGet, u, nil) }, true, -1},
		{"HEAD", func(u string) *http.Request { return mustReq(http.MethodHead, u, nil) }, true, -1},
		{"PUT with body", func(u string) *http.Request {
			return mustReq(http.MethodPut, u, strings.NewReader(payload))
		}, true, -1},
		{"DELETE", func(u string) *http.Request { return mustReq(http.MethodDelete, u, nil) }, true, -1},
		{"POST", func(u string) *http.Request {
			return mustReq(http.MethodPost, u, strings.NewReader(payload))
		}, false, ReasonNotIdempotent},
		{"PATCH", func(u string) *http.Request {
			return mustReq(http.MethodPatch, u, strings.NewReader(payload))
		}, false, ReasonNotIdempotent},
		{"POST with Idempotency-Key", func(u string) *http.Request {
			r := mustReq(http.MethodPost, u, strings.NewReader(payload))
			r.Header.Set("Idempotency-Key", "8e03978e-40d5")
			return r
		}, true, -1},
		{"POST marked Idempotent", func(u string) *http.Request {
			return Idempotent(mustReq(http.MethodPost, u, strings.NewReader(payload)))
		}, true, -1},
		{"PUT body without GetBody", func(u string) *http.Request {
			r := mustReq(http.MethodPut, u, io.NopCloser(strings.NewReader(payload)))
			return r
		}, false, ReasonNotReplayable},
		{"GET with Upgrade", func(u string) *http.Request {
			r := mustReq(http.MethodGet, u, nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, false, ReasonNotReplayable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string
			s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(b))
				mu.Unlock()
				if n == 1 {
					s.wait(r, 40*time.Millisecond)
				}
			})
			c, ht := newClient(t, WithDelay(2*time.Millisecond))
			resp, err := c.Do(tt.req(s.URL))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			st := ht.Stats()
			if hedged := st.Hedges == 1; hedged != tt.wantHedged {
				t.Fatalf("hedged = %v, want %v (stats %+v)", hedged, tt.wantHedged, st)
			}
			if tt.denied >= 0 && st.Denied[tt.denied] != 1 {
				t.Fatalf("denied %v = %d, want 1", tt.denied, st.Denied[tt.denied])
			}
			want := int64(1)
			if tt.wantHedged {
				want = 2
			}
			waitFor(t, "the server to see every attempt", func() bool { return s.received.Load() == want })
			mu.Lock()
			defer mu.Unlock()
			for i, b := range bodies {
				if b != bodies[0] {
					t.Fatalf("attempt %d sent body %q, the first sent %q", i, b, bodies[0])
				}
			}
		})
	}
}

func mustReq(method, u string, body io.Reader) *http.Request {
	r, err := http.NewRequest(method, u, body)
	if err != nil {
		panic(err)
	}
	if _, ok := body.(io.ReadCloser); ok {
		r.GetBody = nil // as for a body net/http cannot replay
	}
	return r
}

func TestHedgeHosts(t *testing.T) {
	slow := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		s.wait(r, 5*time.Second)
	})
	fast := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "from the replica, host "+r.Host)
	})
	fu, _ := url.Parse(fast.URL)
	c, ht := newClient(t, WithDelay(2*time.Millisecond), WithHedgeHosts(fu.Host))
	_, b := get(t, c, slow.URL+"/item")
	if want := "from the replica, host " + fu.Host; string(b) != want {
		t.Fatalf("body %q, want %q", b, want)
	}
	// On a loaded machine the hedge may win before the primary even reaches
	// its server; either way the primary must not be left running there.
	waitFor(t, "the primary's cancellation", func() bool { return slow.cancelled.Load() == slow.received.Load() })
	if st := ht.Stats(); st.HedgesWon != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHedgeTargetNil(t *testing.T) {
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
	})
	c, _ := newClient(t, WithDelay(2*time.Millisecond),
		WithHedgeTarget(func(*http.Request, int) *http.Request { return nil }))
	// The hedge fails; the primary still answers.
	if resp, _ := get(t, c, s.URL); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestParentCancelled(t *testing.T) {
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		s.wait(r, 5*time.Second)
	})
	c, ht := newClient(t, WithDelay(2*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	_, err := c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	waitFor(t, "both attempts to be cancelled", func() bool { return s.cancelled.Load() == 2 })
	waitFor(t, "the hedge's slot", func() bool { return ht.Stats().InFlight == 0 })
}

func TestInFlightCap(t *testing.T) {
	release := make(chan struct{})
	s := newTestServer(t, func(s *testServer, n int64, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, ht := newClient(t, WithDelay(time.Millisecond), WithMaxInFlight(2), WithBudget(1))
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			resp, err := c.Get(s.URL)
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	waitFor(t, "hedges to be refused", func() bool { return ht.Stats().Denied[ReasonInFlight] == 4 })
	if st := ht.Stats(); st.InFlight != 2 || st.Hedges != 2 {
		t.Errorf("stats %+v, want 2 hedges in flight", st)
	}
	close(release)
	wg.Wait()
}

func TestWithPolicyConflict(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for WithPolicy with WithDelay")
		}
	}()
	NewTransport(nil, WithPolicy(NewPolicy()), WithDelay(time.Millisecond))
}

func TestSharedPolicy(t *testing.T) {
	p := NewPolicy(WithDelay(time.Hour))
	a := NewTransport(http.DefaultTransport, WithPolicy(p))
	b := NewTransport(http.DefaultTransport, WithPolicy(p), WithHedgeHosts("elsewhere:80"))
	if a.Policy() != p || b.Policy() != p {
		t.Fatal("transports do not share the policy")
	}
	if _, err := Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	if a.Stats().Requests != 1 {
		t.Fatal("Do and the Transport do not share counters")
	}
}

// flakyBase fails its first n round trips with context.Canceled, as
// net/http does for a request whose reused connection was closed by
// another request's cancellation, and records the bodies it was sent.
type flakyBase struct {
	mu     sync.Mutex
	fail   int
	calls  int
	bodies []string
}

func (f *flakyBase) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		f.bodies = append(f.bodies, string(b))
	}
	if f.calls <= f.fail {
		return nil, context.Canceled
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

func TestSpuriousCancelResent(t *testing.T) {
	tests := []struct {
		name      string
		fail      int
		method    string
		body      string
		cancelled bool // the caller's own context is cancelled
		wantErr   bool
		wantCalls int
	}{
		{"resent once", 1, "GET", "", false, false, 2},
		{"body replayed", 1, "PUT", "payload", false, false, 2},
		{"only once", 2, "GET", "", false, true, 2},
		{"caller cancelled: not resent", 1, "GET", "", true, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := &flakyBase{fail: tt.fail}
			tr := NewTransport(base, WithDelay(time.Hour))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, _ := http.NewRequestWithContext(ctx, tt.method, "http://backend.invalid/x", body)
			resp, err := tr.RoundTrip(req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if resp != nil {
				resp.Body.Close()
			}
			if base.calls != tt.wantCalls {
				t.Errorf("%d round trips, want %d", base.calls, tt.wantCalls)
			}
			if tt.body != "" {
				for i, b := range base.bodies {
					if b != tt.body {
						t.Errorf("attempt %d sent body %q, want %q", i, b, tt.body)
					}
				}
			}
			if want := uint64(tt.wantCalls - 1); tr.Stats().Resent != want {
				t.Errorf("Resent = %d, want %d", tr.Stats().Resent, want)
			}
		})
	}
}
