package web

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

var screenshots = flag.String("screenshots", "", "directory to keep the browser tests' screenshots in (default: the test's temp dir, removed after)")

// chromiumPath finds the browser testenv.Chromium found.
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH")
	return ""
}

// browser starts a headless chromium for t and returns its context. The
// flags turn off the browser's own traffic (updates, sync, safe browsing),
// which would otherwise count as requests leaving the page, and which this
// machine's network refuses.
func browser(t *testing.T) context.Context {
	t.Helper()
	testenv.Require(t, testenv.Chromium)
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	return ctx
}

// pageWatch records what a page did that it must not: requests to other
// origins and console errors or exceptions.
type pageWatch struct {
	origin string
	mu     sync.Mutex
	bad    []string
	reqs   int
}

func watchPage(t *testing.T, ctx context.Context, origin string) *pageWatch {
	t.Helper()
	pw := &pageWatch{origin: origin}
	err := chromedp.Listen(ctx, func(ev any) {
		pw.mu.Lock()
		defer pw.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			pw.reqs++
			u := e.Request.URL
			if !strings.HasPrefix(u, origin+"/") && u != origin && !strings.HasPrefix(u, "data:") {
				pw.bad = append(pw.bad, "request to another origin: "+u)
			}
		case *cdpruntime.EventConsoleAPICalled:
			if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				pw.bad = append(pw.bad, "console error: "+strings.Join(args, " "))
			}
		case *cdpruntime.EventExceptionThrown:
			pw.bad = append(pw.bad, fmt.Sprintf("exception: %s %v", e.ExceptionDetails.Text, e.ExceptionDetails.Exception))
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				pw.bad = append(pw.bad, "browser log error: "+e.Entry.Text+" "+e.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return pw
}

func (pw *pageWatch) check(t *testing.T) {
	t.Helper()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.reqs == 0 {
		t.Error("no request seen: the network watch did not work")
	}
	for _, b := range pw.bad {
		t.Error(b)
	}
}

// saveScreenshot writes the page's screenshot for a person to look at.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", p, len(b))
}

// pageURL is the address gosleuth web prints at start, for the page at
// path ("/?pid=N"): the token in the query, which the first load trades
// for a cookie.
func pageURL(s *Server, ts *httptest.Server, path string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return ts.URL + path + sep + "token=" + s.Token()
}

// seriesPixels counts the pixels of a panel's canvas drawn in the colour
// of its first series (palette[0], #3866c7): the line, not the axes or
// grid, so a chart without points counts none.
const seriesPixels = `(() => {
  const c = document.querySelector("#panel-%s canvas");
  if (!c) return -1;
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4)
    if (Math.abs(d[i] - 0x38) < 24 && Math.abs(d[i+1] - 0x66) < 24 && Math.abs(d[i+2] - 0xc7) < 24 && d[i+3] > 200) n++;
  return n;
})()`

// TestBrowserProcessPage loads a 1 ms ticker patient's page in headless
// chromium: live points arrive, the charts draw their lines, the doctor's
// idle-wakeups finding appears, the runtime charts get the agent's data,
// nothing is requested from another origin and nothing is logged as an
// error.
func TestBrowserProcessPage(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium)
	ctx := browser(t)
	cmd := startPatient(t, []string{"PATIENT_AGENT=1"}, "alloc")
	pid := cmd.Process.Pid
	s, ts := newTestServer(t, Config{Interval: 500 * time.Millisecond, Slice: 2 * time.Second, EvalEvery: 2})
	pw := watchPage(t, ctx, ts.URL)

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	url := pageURL(s, ts, "/?pid="+strconv.Itoa(pid))
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#panel-cpu canvas")),
	); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	// Live points: at least 8 rows after the page loaded.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.gosleuthDebug && window.gosleuthDebug.points() >= 8`,
		chromedp.WithPollingInterval(200*time.Millisecond))); err != nil {
		t.Fatalf("waiting for live points: %v", err)
	}
	finding, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const f = Array.from(document.querySelectorAll(".finding h4")).find(h => h.textContent.includes("wakes")); return f ? f.textContent : ""; })()`,
		chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("waiting for the idle-wakeups finding: %v", err)
	}
	t.Logf("finding: %s", finding)
	// The runtime panels fill once the agent has been read twice.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#panel-goroutines .why").textContent === ""`,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Errorf("runtime panels: %v", err)
	}
	time.Sleep(time.Second) // a frame or two after the last points
	for _, panel := range []string{"cpu", "wake", "threads", "rss", "goroutines", "heap"} {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(seriesPixels, panel)))
		if err != nil {
			t.Fatal(err)
		}
		if n < 20 {
			t.Errorf("panel %s: %d pixels of its first series' colour: no line drawn", panel, n)
		}
	}
	saveScreenshot(t, ctx, "process.png")
	pw.check(t)
}

// TestBrowserListPage loads the process list and filters it to the test's
// own process.
func TestBrowserListPage(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium)
	ctx := browser(t)
	s, ts := newTestServer(t, Config{})
	pw := watchPage(t, ctx, ts.URL)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	self := strconv.Itoa(os.Getpid())
	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL(s, ts, "/?filter="+self)),
		chromedp.WaitVisible(chromedp.CSS("#procs tbody tr")),
	); err != nil {
		t.Fatal(err)
	}
	// Each row as [PID, command line]. The filter keeps the PID itself and
	// any process whose command line holds the text (a browser process's
	// flags held the test's PID once).
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](`Array.from(document.querySelectorAll("#procs tbody tr")).map(tr => [tr.cells[0].textContent, tr.querySelector("td.cmd").textContent])`))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		found = found || r[0] == self
		if r[0] != self && !strings.Contains(r[1], self) {
			t.Errorf("filtered to %s, row %v neither is it nor names it", self, r)
		}
	}
	if !found {
		t.Errorf("filtered to %s, rows %v", self, rows)
	}
	saveScreenshot(t, ctx, "list.png")
	pw.check(t)
}

// TestBrowserProfile clicks "profile 10 s" and waits for the flame graph.
func TestBrowserProfile(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium, testenv.Perf)
	if testing.Short() {
		t.Skip("a 10 s profile (-short)")
	}
	ctx := browser(t)
	cmd := startPatient(t, nil, "alloc")
	s, ts := newTestServer(t, Config{})
	pw := watchPage(t, ctx, ts.URL)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL(s, ts, "/?pid="+strconv.Itoa(cmd.Process.Pid))),
		chromedp.WaitVisible(chromedp.CSS("#panel-cpu canvas")),
		chromedp.Click(chromedp.CSS("#prof")),
		chromedp.WaitVisible(chromedp.CSS("#fc")),
	); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const t = document.getElementById("flametitle").textContent; return t.includes("samples") ? t : ""; })()`,
		chromedp.WithPollingTimeout(40*time.Second)))
	if err != nil {
		t.Fatalf("flame graph: %v", err)
	}
	t.Logf("flame graph: %s", title)
	h, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById("fc").height`))
	if err != nil || h < 3*17 {
		t.Errorf("flame graph canvas %d px high (%v): fewer than three frames deep", h, err)
	}
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("dl").href`))
	if err != nil || !strings.Contains(href, "/api/profile.pb.gz?id=") {
		t.Errorf("pprof link %q (%v)", href, err)
	}
	saveScreenshot(t, ctx, "profile.png")
	pw.check(t)
}

// setHidden makes the page see its tab hidden or shown, as the browser
// tells it (document.hidden and a visibilitychange event).
const setHidden = `(() => {
  Object.defineProperty(document, "hidden", {value: %t, configurable: true});
  document.dispatchEvent(new Event("visibilitychange"));
  return true;
})()`

// TestBrowserHiddenTabPauses: a hidden tab closes its event stream, so the
// process's sampler stops (nobody watches); shown again, it reopens and the
// sampler starts again.
func TestBrowserHiddenTabPauses(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium)
	ctx := browser(t)
	cmd := startPatient(t, nil)
	s, ts := newTestServer(t, Config{Interval: 200 * time.Millisecond, Linger: 200 * time.Millisecond})
	pw := watchPage(t, ctx, ts.URL)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL(s, ts, "/?pid="+strconv.Itoa(cmd.Process.Pid))),
		chromedp.WaitVisible(chromedp.CSS("#panel-cpu canvas")),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sampler to start", func() bool { return s.samplers.Load() == 1 })
	for _, hidden := range []bool{true, false} {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(setHidden, hidden))); err != nil {
			t.Fatal(err)
		}
		want := int32(1)
		if hidden {
			want = 0
		}
		waitFor(t, fmt.Sprintf("%d samplers with the tab hidden=%t", want, hidden), func() bool { return s.samplers.Load() == want })
	}
	// Shown again, live points arrive again.
	n0, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.gosleuthDebug.points()`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`window.gosleuthDebug.points() > %d`, n0),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Errorf("no live points after the tab was shown again: %v", err)
	}
	pw.check(t)
}

// seen is one request a recording handler saw.
type seen struct {
	method, path string
	status       int
	cookie       bool
}

// recorder records each request's answer and whether it carried the
// dashboard's cookie.
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	rs []seen
}

func (rec *recorder) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: rw, status: 200}
	rec.h.ServeHTTP(sw, r)
	_, err := r.Cookie(cookieName(r))
	rec.mu.Lock()
	rec.rs = append(rec.rs, seen{r.Method, r.URL.Path, sw.status, err == nil})
	rec.mu.Unlock()
}

func (rec *recorder) list() []seen {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.rs)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	sw.status = code
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Flush() { sw.ResponseWriter.(http.Flusher).Flush() }

// evilPage is a page on another origin that tries to make the operator's
// browser start exact syscall counting and a profile: an image and two
// no-cors POSTs, with the browser's cookies.
const evilPage = `<!doctype html><title>elsewhere</title>
<img src="%[1]s/api/syscalls?pid=%[2]d&mode=exact">
<script>
const o = {method: "POST", mode: "no-cors", credentials: "include"};
fetch("%[1]s/api/syscalls?pid=%[2]d&mode=exact", o).catch(() => {});
fetch("%[1]s/api/profile?pid=%[2]d&seconds=1", o).catch(() => {});
</script>`

// TestBrowserCrossSite: the operator's browser holds the dashboard's
// cookie and visits a page on another port of the same host (same-site,
// so a SameSite=Strict cookie goes along); the page's image and POSTs reach
// the dashboard with the cookie and are refused, and neither exact
// counting nor a profile starts. Then the dashboard's own page switches
// exact counting on with its checkbox (a POST from its origin).
func TestBrowserCrossSite(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium, testenv.Root, testenv.Tracefs)
	ctx := browser(t)
	pid := startPatient(t, nil).Process.Pid
	s, err := New(Config{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{h: s.Handler()}
	ts := httptest.NewUnstartedServer(rec)
	ts.Config.ConnContext = s.ConnContext
	ts.Start()
	t.Cleanup(func() { s.Close(); ts.Close() })
	evil := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(rw, evilPage, ts.URL, pid)
	}))
	t.Cleanup(evil.Close)

	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL(s, ts, "/")),
		chromedp.WaitVisible(chromedp.CSS("#procs tbody tr")),
		chromedp.Navigate(evil.URL),
	); err != nil {
		t.Fatal(err)
	}
	var attacks []seen
	waitFor(t, "the other page's three requests", func() bool {
		attacks = attacks[:0]
		for _, r := range rec.list() {
			if r.path == "/api/syscalls" || r.path == "/api/profile" {
				attacks = append(attacks, r)
			}
		}
		return len(attacks) >= 3
	})
	for _, r := range attacks {
		if r.status != http.StatusForbidden && r.status != http.StatusMethodNotAllowed {
			t.Errorf("from another origin: %+v, want 403 (or 405 for the image's GET)", r)
		}
		if !r.cookie {
			t.Errorf("from another origin: %+v came without the cookie: the test proves nothing", r)
		}
	}
	s.mu.Lock()
	w := s.watches[pid]
	s.mu.Unlock()
	s.profiles.mu.Lock()
	profiles := len(s.profiles.runs) + len(s.profiles.running)
	s.profiles.mu.Unlock()
	if w != nil || profiles != 0 {
		t.Fatalf("after the other page: watch %v, %d profiles", w != nil, profiles)
	}

	if err := chromedp.Do(ctx,
		chromedp.Navigate(pageURL(s, ts, "/?pid="+strconv.Itoa(pid))),
		chromedp.WaitVisible(chromedp.CSS("#panel-cpu canvas")),
		chromedp.Click(chromedp.CSS("#exact")),
	); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "exact counting from the page's checkbox", func() bool {
		s.mu.Lock()
		w := s.watches[pid]
		s.mu.Unlock()
		if w == nil {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.exactOn
	})
}
