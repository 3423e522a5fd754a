package web

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestRingJSON(t *testing.T) {
	r := newRing(3)
	if got := string(r.appendJSON(nil, 0)); !strings.HasPrefix(got, `{"seq":0,"cols":[[],[]`) {
		t.Fatalf("empty ring: %s", got)
	}
	for i := 1; i <= 5; i++ {
		p := blank(float64(i))
		p[colUsr] = float64(i) * 1.5
		r.add(&p)
	}
	var got struct {
		Seq  uint64       `json:"seq"`
		Cols [][]*float64 `json:"cols"`
	}
	if err := json.Unmarshal(r.appendJSON(nil, 0), &got); err != nil {
		t.Fatal(err)
	}
	if got.Seq != 5 || len(got.Cols) != int(numCols) {
		t.Fatalf("seq %d, %d columns", got.Seq, len(got.Cols))
	}
	// Only the last three rows are held; unknowns are null.
	wantT := []float64{3, 4, 5}
	for i, v := range got.Cols[colT] {
		if *v != wantT[i] {
			t.Errorf("t[%d] = %v, want %v", i, *v, wantT[i])
		}
		if *got.Cols[colUsr][i] != wantT[i]*1.5 {
			t.Errorf("usr[%d] = %v", i, *got.Cols[colUsr][i])
		}
		if got.Cols[colRSS][i] != nil {
			t.Errorf("rss[%d] = %v, want null", i, *got.Cols[colRSS][i])
		}
	}
	// After seq 4 only row 5 is sent.
	if err := json.Unmarshal(r.appendJSON(nil, 4), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Cols[colT]) != 1 || *got.Cols[colT][0] != 5 {
		t.Errorf("after 4: %v", got.Cols[colT])
	}
}

func TestAppendNum(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		time bool
		want string
	}{
		{math.NaN(), false, "null"},
		{math.Inf(1), false, "null"},
		{12, false, "12"},
		{1.23456789, false, "1.2346"},
		{1795487805.9071, true, "1795487805.907"},
		{15134720, false, "15134720"},
	} {
		if got := string(appendNum(nil, tc.v, tc.time)); got != tc.want {
			t.Errorf("appendNum(%v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// newTestServer serves a dashboard on loopback, wired as gosleuth web
// wires it. The test server's Client carries the token.
func newTestServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ConnContext = s.ConnContext
	ts.Start()
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	c := ts.Client()
	c.Transport = bearer{s.Token(), c.Transport}
	return s, ts
}

// bearer adds the dashboard's token to each request, as a script would.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func TestHandlerSafety(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	for _, tc := range []struct {
		method, path, host string
		want               int
	}{
		{"GET", "/", "", 200},
		{"HEAD", "/assets/app.js", "", 200},
		{"GET", "/assets/vendor/uPlot.iife.min.js", "", 200},
		{"GET", "/assets/nope.js", "", 404},
		{"GET", "/nope", "", 404},
		{"POST", "/", "", 405},
		{"PUT", "/api/syscalls?pid=1&mode=exact", "", 405},
		{"GET", "/api/syscalls?pid=1&mode=exact", "", 405},
		{"GET", "/api/profile?pid=1&seconds=1", "", 405},
		{"POST", "/api/history?pid=1", "", 405},
		{"DELETE", "/api/history?pid=1", "", 405},
		{"GET", "/", "evil.example:9468", 403},
		{"GET", "/", "localhost:9468", 200},
		{"GET", "/", "[::1]:9468", 200},
		{"GET", "/api/history", "", 400},
		{"GET", "/api/history?pid=abc", "", 400},
		{"GET", "/api/history?pid=999999999", "", 404},
		{"POST", "/api/syscalls?pid=1&mode=fast", "", 400},
		{"GET", "/api/profile.pb.gz?id=7", "", 404},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s (Host %q): %d, want %d", tc.method, tc.path, tc.host, resp.StatusCode, tc.want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode == 200 && !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
	}
}

// TestAssetsGzip checks the assets are served gzipped and within budget.
func TestAssetsGzip(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	req, _ := http.NewRequest("GET", ts.URL+"/assets/vendor/uPlot.iife.min.js", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := ts.Client().Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(zr)
	if !strings.Contains(string(b), "uPlot") {
		t.Errorf("body does not look like uPlot")
	}
	plain, gz := s.AssetSizes()
	t.Logf("assets: %d bytes, %d gzipped", plain, gz)
	if gz > 150<<10 {
		t.Errorf("assets are %d bytes gzipped, over the 150 KB budget", gz)
	}
}

// startPatient runs the test patient and returns its PID.
func startPatient(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	bin := testbin.Build(t, "./testdata/patient")
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if p := testbin.Start(t, cmd, testbin.Options{}); p.Ready() != "ready" {
		t.Fatalf("patient: %q", p.Ready())
	}
	return cmd
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, name, data string
}

// readEvents parses server-sent events from r onto a channel.
func readEvents(r io.Reader) <-chan sseEvent {
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch
}

type wireState struct {
	PID      int           `json:"pid"`
	Exited   bool          `json:"exited"`
	Sampling bool          `json:"sampling"`
	Findings []wireFinding `json:"findings"`
	Runtime  struct {
		From string `json:"from"`
	} `json:"runtime"`
}

type wireFinding struct {
	ID    string  `json:"id"`
	Began float64 `json:"began"`
	Cause string  `json:"cause"`
	Fix   string  `json:"fix"`
}

type wireBatch struct {
	Seq  uint64       `json:"seq"`
	Cols [][]*float64 `json:"cols"`
}

// TestHistoryAndEvents follows a 1 ms ticker patient through the API: the
// history reply, the event stream resuming after a sequence number without
// loss or repeat, the doctor's idle-wakeups finding with where it began,
// the runtime series from its agent, its exit (the stream says so and
// ends, the history is kept) and the sampler stopping once nobody watches.
func TestHistoryAndEvents(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	cmd := startPatient(t, []string{"PATIENT_AGENT=1"}, "alloc")
	pid := cmd.Process.Pid
	s, ts := newTestServer(t, Config{Interval: 200 * time.Millisecond, Slice: time.Second, EvalEvery: 3, Linger: 100 * time.Millisecond})
	url := ts.URL + "/api/history?pid=" + strconv.Itoa(pid)

	var h struct {
		State  wireState `json:"state"`
		Series []struct {
			Name string `json:"name"`
		} `json:"series"`
		Data wireBatch `json:"data"`
	}
	getJSON(t, ts.Client(), url, &h)
	if h.State.PID != pid || len(h.Series) != int(numCols) || h.Series[colWake].Name != "wake" {
		t.Fatalf("history: %+v", h)
	}

	resp, err := ts.Client().Get(ts.URL + "/api/events?pid=" + strconv.Itoa(pid) + "&since=" + strconv.FormatUint(h.Data.Seq, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := readEvents(resp.Body)
	last := h.Data.Seq
	var rows int
	var wakes []float64
	var st wireState
	deadline := time.After(30 * time.Second)
	// The ticker's finding is awaited among the others: an allocating
	// patient's RSS still rising in its first seconds may add
	// memory-growth, in either order.
	isTicker := func(f wireFinding) bool { return f.ID == "idle-wakeups" }
	for !slices.ContainsFunc(st.Findings, isTicker) || rows < 10 || st.Runtime.From == "" {
		select {
		case <-deadline:
			t.Fatalf("after %d rows: state %+v", rows, st)
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended")
			}
			switch ev.name {
			case "points":
				var b wireBatch
				if err := json.Unmarshal([]byte(ev.data), &b); err != nil {
					t.Fatal(err)
				}
				n := uint64(len(b.Cols[colT]))
				if b.Seq != last+n || ev.id != strconv.FormatUint(b.Seq, 10) {
					t.Fatalf("batch of %d rows ending at %d (id %s) after %d: rows lost or repeated", n, b.Seq, ev.id, last)
				}
				last = b.Seq
				rows += int(n)
				for _, v := range b.Cols[colWake] {
					if v != nil {
						wakes = append(wakes, *v)
					}
				}
			case "state":
				if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	f := st.Findings[slices.IndexFunc(st.Findings, isTicker)]
	if f.ID != "idle-wakeups" || f.Cause == "" || f.Fix == "" || f.Began <= 0 {
		t.Errorf("finding: %+v", f)
	}
	// A 1 ms ticker wakes a thread about a thousand times a second (two
	// switches per tick in Go); well above the doctor's 100/s floor.
	if med := median(wakes); med < 500 {
		t.Errorf("median wake-ups %.0f/s from a 1 ms ticker", med)
	}

	cmd.Process.Kill()
	cmd.Wait()
	deadline = time.After(10 * time.Second)
	for !st.Exited {
		select {
		case <-deadline:
			t.Fatal("no exit reported")
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended before saying the process exited")
			}
			if ev.name == "state" {
				json.Unmarshal([]byte(ev.data), &st)
			}
		}
	}
	for range events {
		// The stream ends after the exit.
	}
	getJSON(t, ts.Client(), url, &h)
	if !h.State.Exited || len(h.Data.Cols[colT]) < rows {
		t.Errorf("after exit: exited %v, %d rows kept of %d seen", h.State.Exited, len(h.Data.Cols[colT]), rows)
	}
	waitFor(t, "samplers to stop", func() bool { return s.samplers.Load() == 0 })
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c[len(c)/2]
}

// TestSharedSampler checks that viewers of one process share one sampler
// and that it stops after the last one leaves.
func TestSharedSampler(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	cmd := startPatient(t, nil)
	pid := strconv.Itoa(cmd.Process.Pid)
	s, ts := newTestServer(t, Config{Interval: 100 * time.Millisecond, Linger: 200 * time.Millisecond})
	var bodies []io.Closer
	for range 5 {
		resp, err := ts.Client().Get(ts.URL + "/api/events?pid=" + pid)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		<-readEvents(resp.Body) // the first state
	}
	if n := s.samplers.Load(); n != 1 {
		t.Errorf("%d samplers for five viewers of one process", n)
	}
	var h struct {
		Data wireBatch `json:"data"`
	}
	// Two rows at least before the viewers leave (on a loaded machine five
	// connections may take longer than one interval, or less).
	waitFor(t, "two rows of history", func() bool {
		getJSON(t, ts.Client(), ts.URL+"/api/history?pid="+pid, &h)
		return len(h.Data.Cols[colT]) >= 2
	})
	for _, b := range bodies {
		b.Close()
	}
	waitFor(t, "the sampler to stop", func() bool { return s.samplers.Load() == 0 })
	// The history stays, and a new viewer starts a new sampler.
	h.Data = wireBatch{}
	getJSON(t, ts.Client(), ts.URL+"/api/history?pid="+pid, &h)
	if len(h.Data.Cols[colT]) < 2 {
		t.Errorf("history lost: %d rows", len(h.Data.Cols[colT]))
	}
}

// TestProcList reads the process list and finds the test itself in it.
func TestProcList(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	_, ts := newTestServer(t, Config{Linger: 50 * time.Millisecond})
	var l struct {
		Cols []string `json:"cols"`
		Rows [][]any  `json:"rows"`
	}
	getJSON(t, ts.Client(), ts.URL+"/api/procs", &l)
	if len(l.Cols) != len(listCols) || l.Cols[0] != "pid" {
		t.Fatalf("cols %v", l.Cols)
	}
	found := false
	for _, r := range l.Rows {
		if int(r[0].(float64)) == os.Getpid() {
			found = true
		}
	}
	if !found {
		t.Errorf("the test's own process is not in the list of %d", len(l.Rows))
	}
}

// TestPIDRestriction checks that --pid confines the dashboard.
func TestPIDRestriction(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	_, ts := newTestServer(t, Config{PIDs: []int{os.Getpid()}})
	resp, err := ts.Client().Get(ts.URL + "/api/history?pid=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("pid 1 outside --pid: %d, want 403", resp.StatusCode)
	}
}

func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
