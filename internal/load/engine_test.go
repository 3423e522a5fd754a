package load

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// These tests run the generator against servers in the test process on
// loopback. The machine may be loaded (2 cores shared with other jobs), so
// bounds are generous but still fail on the bugs they are aimed at.

const testTick = 250 * time.Millisecond

func serve(t *testing.T, h http.HandlerFunc) (*httptest.Server, *url.URL) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, u
}

func hello(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("hello\n")) }

// timed runs a timing check up to n times, and no new attempt after
// budget. The machine may be loaded: a stall of the test process can break
// a timing bound once, while the bugs these checks aim at break it every
// time. fn returns its problems and whether the generator reported itself
// late (lag or a rate shortfall with free connections). A check that failed
// only in attempts where the generator was late is skipped with the
// problems: on such a machine the bounds say nothing about the code.
func timed(t *testing.T, n int, budget time.Duration, fn func() (probs []string, late bool)) {
	t.Helper()
	start := time.Now()
	var probs []string
	allLate := true
	for i := 1; i <= n; i++ {
		p, late := fn()
		if len(p) == 0 {
			return
		}
		probs, allLate = p, allLate && late
		t.Logf("attempt %d (generator late: %v): %s", i, late, strings.Join(p, "; "))
		if time.Since(start) > budget {
			break
		}
	}
	if allLate {
		t.Skipf("the generator reported itself late in every failed attempt (a loaded machine): %s", strings.Join(probs, "; "))
	}
	t.Error(strings.Join(probs, "\n"))
}

func problem(probs *[]string, format string, args ...any) {
	*probs = append(*probs, fmt.Sprintf(format, args...))
}

func runStep(t *testing.T, cfg Config, rate float64, d time.Duration) *StepResult {
	t.Helper()
	if cfg.Tick == 0 {
		cfg.Tick = testTick
	}
	rep, err := Run(context.Background(), cfg, Plan{Rate: rate, Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 1 {
		t.Fatalf("%d steps, want 1", len(rep.Steps))
	}
	return rep.Steps[0]
}

// TestKnownDelay: a server that sleeps 20 ms answers in 20 ms plus a little;
// the percentiles must say so within the histogram's precision and the
// scheduling noise of a loaded machine.
func TestKnownDelay(t *testing.T) {
	testenv.Timing(t)
	const delay = 20 * time.Millisecond
	_, u := serve(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.Write([]byte("ok"))
	})
	timed(t, 3, 10*time.Second, func() (probs []string, late bool) {
		s := runStep(t, Config{URL: u, Connections: 10}, 100, 2*time.Second)
		if s.Requests < 120 {
			problem(&probs, "%d requests in %.2fs at 100/s", s.Requests, s.Seconds)
		}
		ms := float64(delay) / 1e6
		for name, v := range map[string]float64{"p50": s.Latency.P50, "uncorrected p50": s.Uncorrected.P50} {
			// The server cannot answer faster than its sleep; 0.1% is the
			// histogram's precision.
			if v < ms*0.999 || v > ms+10 {
				problem(&probs, "%s = %.3f ms, want %.0f ms (+ up to 10 ms of noise)", name, v, ms)
			}
		}
		if s.Latency.P90 < ms*0.999 || s.Uncorrected.P90 > s.Latency.P90+0.01 {
			problem(&probs, "p90 %.3f ms (uncorrected %.3f) for a %.0f ms server", s.Latency.P90, s.Uncorrected.P90, ms)
		}
		if s.Uncorrected.P50 > s.Latency.P50+0.01 {
			problem(&probs, "uncorrected p50 %.3f above corrected %.3f", s.Uncorrected.P50, s.Latency.P50)
		}
		if s.Errors != 0 || s.Status["200"] != s.Requests {
			problem(&probs, "errors %d, status %v, requests %d", s.Errors, s.Status, s.Requests)
		}
		return probs, s.GeneratorLate
	})
}

// TestCoordinatedOmission: the server stalls once for 200 ms. Requests
// scheduled during the stall wait for it, so the corrected p99.9 shows it;
// on the single connection only one request was in flight during the
// stall, so the uncorrected p99.9 does not (its max does).
func TestCoordinatedOmission(t *testing.T) {
	testenv.Timing(t)
	const stall = 200 * time.Millisecond
	timed(t, 3, 12*time.Second, func() (probs []string, late bool) {
		var n atomic.Int64
		_, u := serve(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1000 { // 2 s into the step, inside the measured window
				time.Sleep(stall)
			}
			w.Write([]byte("ok"))
		})
		s := runStep(t, Config{URL: u, Connections: 1, Warmup: testTick}, 500, 3*time.Second)
		if n.Load() < 1000 {
			problem(&probs, "server saw %d requests; the stall never happened", n.Load())
			return probs, s.GeneratorLate
		}
		t.Logf("corrected %+v uncorrected %+v requests %d", s.Latency, s.Uncorrected, s.Requests)
		if s.Latency.P999 < 150 {
			problem(&probs, "corrected p99.9 %.1f ms: the 200 ms stall is missing", s.Latency.P999)
		}
		if s.Latency.P99 < 20 {
			problem(&probs, "corrected p99 %.1f ms: ~100 requests were due during the stall, it should show", s.Latency.P99)
		}
		if s.Uncorrected.P999 > 100 {
			problem(&probs, "uncorrected p99.9 %.1f ms: only one request saw the stall", s.Uncorrected.P999)
		}
		if s.Uncorrected.Max < 190 {
			problem(&probs, "uncorrected max %.1f ms: the stalled request itself is missing", s.Uncorrected.Max)
		}
		return probs, s.GeneratorLate
	})
}

// TestRateAccuracy: the server counts what arrives; both sides must agree
// with the target rate. Never more than the target; not less unless the
// generator itself says it was late (then the attempt is repeated).
func TestRateAccuracy(t *testing.T) {
	testenv.Timing(t)
	const rate = 1000
	timed(t, 3, 12*time.Second, func() (probs []string, late bool) {
		var n atomic.Int64
		_, u := serve(t, func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			w.Write([]byte("ok"))
		})
		cfg := Config{URL: u, Connections: 20, Tick: testTick}
		rep, err := Run(context.Background(), cfg, Plan{Rate: rate, Duration: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Steps[0]
		got := n.Load()
		t.Logf("achieved %.1f/s, server saw %d, lag %+v pacer %+v valid %v %v", s.AchievedRate, got, s.Lag, s.PacerLag, s.Valid, s.Invalid)
		// The generator reads the measured window's edges by its own
		// clock: when it runs late they move by up to its lag, and the
		// rate it computes can pass the target by the requests of that
		// lag; the server's count cannot pass it.
		over := 0.01*rate + rate*max(s.Lag.Max, s.PacerLag.Max)/1e3/max(s.Seconds, 1e-9)
		if s.AchievedRate > rate+over || got > 3010 {
			t.Fatalf("achieved %.1f/s, server received %d: above the target rate (%d/s for 3 s)", s.AchievedRate, got, rate)
		}
		var sum int64
		for _, tk := range rep.Ticks {
			sum += tk.Requests
		}
		if sum > got || sum < got-int64(cfg.Connections) {
			problem(&probs, "ticks count %d requests, server %d", sum, got)
		}
		if !s.Valid && !strings.Contains(strings.Join(s.Invalid, " "), "generator") {
			problem(&probs, "invalid for a reason other than the generator: %v", s.Invalid)
		}
		if s.AchievedRate < 0.97*rate {
			problem(&probs, "achieved %.1f/s, want %d/s within -3%%", s.AchievedRate, rate)
		}
		if got < 2900 {
			problem(&probs, "server received %d requests, want ~3000", got)
		}
		if s.MaxBacklog > 5 {
			problem(&probs, "backlog %d at 1000/s on a fast server", s.MaxBacklog)
		}
		return probs, s.GeneratorLate
	})
}

// TestConnectionCap: a slow server and a rate that would need 4x the
// connections. The generator must stay at the cap, fall behind and say so.
func TestConnectionCap(t *testing.T) {
	testenv.Timing(t)
	var cur, peak atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		w.Write([]byte("slow"))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			v := cur.Add(1)
			for p := peak.Load(); v > p && !peak.CompareAndSwap(p, v); p = peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			cur.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	const conns = 5
	timed(t, 2, 6*time.Second, func() (probs []string, late bool) {
		s := runStep(t, Config{URL: u, Connections: conns}, 200, 2*time.Second)
		t.Logf("achieved %.1f backlog %d in flight %d invalid %v", s.AchievedRate, s.MaxBacklog, s.MaxInFlight, s.Invalid)
		if p := peak.Load(); p > conns {
			t.Fatalf("server saw %d connections at once, cap %d", p, conns)
		}
		if s.MaxConnections > conns || s.MaxConnections < 1 {
			t.Fatalf("generator reports %d connections, cap %d", s.MaxConnections, conns)
		}
		if s.AchievedRate > 60 { // 5 connections x 10/s each
			t.Fatalf("achieved %.1f/s: more than 5 connections can carry", s.AchievedRate)
		}
		if s.Valid || !strings.Contains(strings.Join(s.Invalid, " "), "connections were busy") {
			problem(&probs, "valid %v, reasons %v: want invalid for busy connections", s.Valid, s.Invalid)
		}
		if s.MaxBacklog < 100 {
			problem(&probs, "backlog %d: requests due but not sent must pile up", s.MaxBacklog)
		}
		// Corrected latency includes the wait for a connection.
		if s.Latency.P99 < 500 || s.Uncorrected.P99 > s.Latency.P99/2 {
			problem(&probs, "corrected p99 %.0f ms, uncorrected p99 %.0f ms", s.Latency.P99, s.Uncorrected.P99)
		}
		return probs, s.Lag.P99 > 1
	})
}

// TestErrorKinds: refused, reset, timeout and HTTP status errors are
// counted by kind, never a crash.
func TestErrorKinds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/"
	ln.Close()
	_, reset := serve(t, func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST instead of FIN
			}
			c.Close()
		}
	})
	_, slow := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	_, unavailable := serve(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	tests := []struct {
		name    string
		url     string
		kind    string
		timeout time.Duration
	}{
		{"refused", refused, "refused", 2 * time.Second},
		{"reset", reset.String(), "reset", 2 * time.Second},
		{"timeout", slow.String(), "timeout", 200 * time.Millisecond},
		{"http", unavailable.String(), "http", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, _ := url.Parse(tt.url)
			s := runStep(t, Config{URL: u, Connections: 4, Timeout: tt.timeout, Warmup: testTick}, 40, time.Second)
			if s.Errors == 0 || s.ErrorKinds[tt.kind] != s.Errors {
				t.Errorf("errors %d by kind %v, want all %q", s.Errors, s.ErrorKinds, tt.kind)
			}
			if tt.kind == "http" && s.Status["503"] != s.Requests {
				t.Errorf("status %v, want all 503", s.Status)
			}
			// A server that refuses or resets is never "the generator
			// fell behind".
			if tt.kind == "refused" || tt.kind == "reset" {
				if s.GeneratorLate || strings.Contains(strings.Join(s.Invalid, "; "), "generator fell behind") {
					t.Errorf("invalid because %q, generator late %v", s.Invalid, s.GeneratorLate)
				}
			}
		})
	}
}

// TestKeepAliveAndClose: responses with "Connection: close" and chunked
// bodies work, and connections are re-opened within the cap.
func TestKeepAliveAndClose(t *testing.T) {
	var i atomic.Int64
	_, u := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if i.Add(1)%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		f := w.(http.Flusher)
		w.Write([]byte("chunk1"))
		f.Flush() // forces chunked encoding
		w.Write([]byte("chunk2"))
	})
	s := runStep(t, Config{URL: u, Connections: 3, Warmup: testTick}, 100, time.Second)
	if s.Errors != 0 || s.Requests < 60 {
		t.Errorf("errors %v, requests %d", s.ErrorKinds, s.Requests)
	}
	if s.MaxConnections > 3 {
		t.Errorf("%d connections, cap 3", s.MaxConnections)
	}
}

// TestHTTP2 runs over h2c and over TLS (ALPN) through net/http.
func TestHTTP2(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[tls], func(t *testing.T) {
			var h2 atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor == 2 {
					h2.Add(1)
				}
				w.Write([]byte("ok"))
			}))
			cfg := Config{Connections: 4, Warmup: testTick}
			if tls {
				srv.EnableHTTP2 = true
				srv.StartTLS()
				cfg.Insecure = true // the test server's certificate
			} else {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetHTTP1(true)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
				srv.Start()
				cfg.Proto = ProtoHTTP2
			}
			t.Cleanup(srv.Close)
			cfg.URL, _ = url.Parse(srv.URL)
			s := runStep(t, cfg, 100, time.Second)
			if s.Errors != 0 || s.Requests < 50 || h2.Load() < s.Requests {
				t.Errorf("errors %v, requests %d, over HTTP/2 %d", s.ErrorKinds, s.Requests, h2.Load())
			}
			if s.MaxConnections > 4 || s.MaxConnections < 1 {
				t.Errorf("%d connections, cap 4", s.MaxConnections)
			}
		})
	}
}

// TestClosedLoop: --rate max keeps every connection busy.
func TestClosedLoop(t *testing.T) {
	_, u := serve(t, hello)
	s := runStep(t, Config{URL: u, Connections: 4, Warmup: testTick}, 0, time.Second)
	if s.Requests < 100 || s.Errors != 0 || !s.Valid {
		t.Errorf("requests %d errors %d valid %v %v", s.Requests, s.Errors, s.Valid, s.Invalid)
	}
}

// TestSLASearch: the server adds 100 ms to every request while the request
// rate it sees exceeds 300/s, so the highest rate meeting p99<=50ms is
// about 300/s. The lag rule is relaxed to 20 ms: on a loaded machine a
// 1 ms rule makes the search stop early (correctly) and TestLagRule covers
// the rule; this test is about the search.
func TestSLASearch(t *testing.T) {
	testenv.Timing(t)
	const knee = 300
	var mu sync.Mutex
	var arrivals []time.Time
	_, u := serve(t, func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		mu.Lock()
		arrivals = append(arrivals, now)
		i := 0
		for i < len(arrivals) && now.Sub(arrivals[i]) > 500*time.Millisecond {
			i++
		}
		arrivals = arrivals[i:]
		rate := float64(len(arrivals)) / 0.5
		mu.Unlock()
		if rate > knee {
			time.Sleep(100 * time.Millisecond)
		}
		w.Write([]byte("ok"))
	})
	sla, _ := ParseSLA("p99<=50ms")
	step, _ := ParseStep("+100/1s")
	cfg := Config{URL: u, Connections: 60, Tick: testTick, MaxLag: 20 * time.Millisecond}
	timed(t, 2, 20*time.Second, func() (probs []string, late bool) {
		rep, err := Search(context.Background(), cfg, Plan{Rate: 200, Duration: 25 * time.Second, Step: step,
			MaxRate: 1000, SLA: &sla})
		if err != nil {
			t.Fatal(err)
		}
		sr := rep.SLA
		for _, s := range rep.Steps {
			t.Logf("step %d %s rate %.0f achieved %.0f p99 %.1f sla %+v valid %v", s.Index, s.Phase, s.TargetRate,
				s.AchievedRate, s.Latency.P99, *s.SLA, s.Valid)
		}
		t.Logf("search %+v", *sr)
		for _, s := range rep.Steps {
			late = late || s.GeneratorLate
		}
		if !sr.Found {
			problem(&probs, "no rate found: %s", sr.Note)
			return probs, late
		}
		if sr.LastPass < 200 || sr.LastPass > 300 || sr.FirstFail != sr.LastPass+100 {
			problem(&probs, "ramp bracket [%g, %g], want [200 or 300, +100]", sr.LastPass, sr.FirstFail)
		}
		if sr.MaxRate < 0.75*knee || sr.MaxRate > 1.15*knee {
			problem(&probs, "max rate %.0f, want about %d", sr.MaxRate, knee)
		}
		if len(sr.Repeats) != SearchRepeats || sr.Min > sr.MaxRate || sr.Max < sr.MaxRate {
			problem(&probs, "repeats %v, spread %.0f-%.0f around %.0f", sr.Repeats, sr.Min, sr.Max, sr.MaxRate)
		}
		return probs, late
	})
}

// TestInterrupt: cancelling the context ends the run early with the report
// of what ran.
func TestInterrupt(t *testing.T) {
	_, u := serve(t, hello)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1200*time.Millisecond, cancel)
	start := time.Now()
	rep, err := Run(ctx, Config{URL: u, Connections: 2, Tick: testTick, Warmup: testTick},
		Plan{Rate: 100, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("run took %s after the interrupt at 1.2s", d)
	}
	if !rep.Interrupted || len(rep.Steps) != 1 || rep.Steps[0].Requests < 20 || rep.Steps[0].Valid {
		t.Errorf("interrupted %v, steps %d, requests %d", rep.Interrupted, len(rep.Steps), rep.Steps[0].Requests)
	}
}

// TestRampAndReports: a short ramp with the target watched (this process
// serves), written to a directory.
func TestRampAndReports(t *testing.T) {
	srv, u := serve(t, hello)
	_, portS, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portS)
	pid, err := FindListener("/proc", port)
	if err != nil {
		t.Fatalf("find listener on port %d: %v", port, err)
	}
	if pid != os.Getpid() {
		t.Errorf("listener pid %d, want this process %d", pid, os.Getpid())
	}
	step, _ := ParseStep("+100/500ms")
	var ticks atomic.Int64
	cfg := Config{URL: u, Connections: 4, Tick: testTick, Watch: pid, OnTick: func(Tick) { ticks.Add(1) }}
	rep, err := Run(context.Background(), cfg, Plan{Rate: 100, Duration: 1500 * time.Millisecond, Step: step, MaxRate: 300})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) != 3 || rep.Steps[2].TargetRate != 300 {
		t.Fatalf("%d steps", len(rep.Steps))
	}
	if ticks.Load() != 6 || len(rep.Ticks) != 6 {
		t.Errorf("OnTick called %d times, %d ticks, want 6", ticks.Load(), len(rep.Ticks))
	}
	for _, s := range rep.Steps {
		if s.Target == nil || s.Target.PID != pid || s.Target.RSSMaxBytes == 0 || s.Target.MaxThreads < 1 {
			t.Errorf("step %d target %+v", s.Index, s.Target)
		}
	}
	dir := t.TempDir()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.txt", "report.json", "series.csv", "latency.hlog", "report.html",
		"step-01.hgrm", "step-03.hgrm", "step-03-uncorrected.hgrm"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	html := string(page)
	if strings.Count(html, "<svg") < 4 || strings.Contains(html, "<script") || strings.Contains(html, "src=") ||
		strings.Contains(html, "href=") {
		t.Errorf("HTML report is not self-contained with its charts")
	}
	csvb, _ := os.ReadFile(filepath.Join(dir, "series.csv"))
	if lines := strings.Count(string(csvb), "\n"); lines != 7 {
		t.Errorf("CSV has %d lines, want header + 6 ticks", lines)
	}
}

// TestLagRule: a step whose generator lag p99 exceeds MaxLag is invalid and
// says why (here the limit is below any real lag).
func TestLagRule(t *testing.T) {
	_, u := serve(t, hello)
	s := runStep(t, Config{URL: u, Connections: 2, MaxLag: time.Nanosecond, Warmup: testTick}, 100, time.Second)
	if s.Valid || !s.GeneratorLate || !strings.Contains(strings.Join(s.Invalid, " "), "generator lag") {
		t.Errorf("valid %v late %v reasons %v", s.Valid, s.GeneratorLate, s.Invalid)
	}
}

// TestHungServer: requests a server never answers are counted when the run
// ends (after waiting a request timeout for them), as timeouts, and make
// the step invalid; a server that stops answering halfway likewise.
func TestHungServer(t *testing.T) {
	never := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	var n atomic.Int64
	halfway := func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 10 {
			<-r.Context().Done()
			return
		}
		w.Write([]byte("ok"))
	}
	for _, tt := range []struct {
		name string
		h    http.HandlerFunc
	}{{"never", never}, {"halfway", halfway}} {
		t.Run(tt.name, func(t *testing.T) {
			_, u := serve(t, tt.h)
			s := runStep(t, Config{URL: u, Connections: 50, Timeout: 3 * time.Second, Warmup: testTick}, 40, time.Second)
			if s.Valid || s.InFlightAtEnd == 0 || s.ErrorKinds["timeout"] != s.InFlightAtEnd || s.Errors != s.InFlightAtEnd {
				t.Errorf("valid %v, unanswered %d (in flight at end %d), errors %v, reasons %q",
					s.Valid, s.Unanswered, s.InFlightAtEnd, s.ErrorKinds, s.Invalid)
			}
		})
	}
}

func TestClassifyNoFDs(t *testing.T) {
	for _, err := range []error{syscall.EMFILE, &net.OpError{Op: "dial", Err: os.NewSyscallError("socket", syscall.ENFILE)}} {
		if k := classify(err); k != ErrNoFDs {
			t.Errorf("classify(%v) = %s, want %s", err, k, ErrNoFDs)
		}
	}
}

// TestNothingSent: a rate so low that no request falls in the measured
// interval leaves the step invalid, not valid with p99 0.
func TestNothingSent(t *testing.T) {
	_, u := serve(t, hello)
	s := runStep(t, Config{URL: u, Connections: 1, Warmup: testTick}, 0.001, time.Second)
	if s.Valid || s.Requests != 0 {
		t.Errorf("valid %v with %d requests, reasons %q", s.Valid, s.Requests, s.Invalid)
	}
}
