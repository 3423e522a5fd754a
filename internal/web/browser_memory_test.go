package web

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestBrowserRuntimeFromMemory loads the page of a Go patient without the
// agent or any endpoint: its GC, heap and goroutine charts fill from the
// runtime read in its memory, and the page names that source.
func TestBrowserRuntimeFromMemory(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.AMD64, testenv.Chromium)
	ctx := browser(t)
	cmd := startPatient(t, nil, "alloc")
	s, ts := newTestServer(t, Config{Interval: 500 * time.Millisecond, Slice: 2 * time.Second, EvalEvery: 2})
	pw := watchPage(t, ctx, ts.URL)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	url := pageURL(s, ts, "/?pid="+strconv.Itoa(cmd.Process.Pid))
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS("#panel-goroutines canvas")),
	); err != nil {
		t.Fatalf("load %s: %v", url, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#panel-goroutines .why").textContent === "" && window.gosleuthDebug && window.gosleuthDebug.points() >= 8`,
		chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		why, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#panel-goroutines .why").textContent`))
		t.Fatalf("runtime panels of a program without the agent: %v (the page says %q)", err, why)
	}
	time.Sleep(time.Second)
	for _, panel := range []string{"goroutines", "heap", "gc"} {
		if ok, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`!!document.querySelector("#panel-%s canvas")`, panel))); !ok {
			continue // a panel this page does not have
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(seriesPixels, panel)))
		if err != nil {
			t.Fatal(err)
		}
		if n < 20 {
			t.Errorf("panel %s: %d pixels of its first series' colour: no line drawn from the memory source", panel, n)
		}
	}
	s.mu.Lock()
	w := s.watches[cmd.Process.Pid]
	s.mu.Unlock()
	if w == nil {
		t.Fatal("no watch of the patient")
	}
	w.mu.Lock()
	from := w.runtimeFrom
	w.mu.Unlock()
	if from != "memory" {
		t.Errorf("runtime source %q, want memory", from)
	}
	pw.check(t)
}
