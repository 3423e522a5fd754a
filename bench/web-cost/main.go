// Command web-cost measures gosleuth web against the goals of its issue, in
// one run on this machine:
//
//   - the embedded assets' gzipped size;
//   - the server's CPU and wake-ups with no viewer, one viewer and ten
//     viewers of one process at 1 s, next to prometheus-node-exporter scraped
//     once a second in the same run (the anchor: the usual always-on
//     per-host agent);
//   - the time from navigation to the first chart with an hour of history
//     (3,600 rows) in headless chromium;
//   - the page's JS heap over a run of live updates.
//
// Run it from the repository root: go run ./bench/web-cost [-heap-for 30m].
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gosleuth/gosleuth/internal/web"
)

func main() {
	window := flag.Duration("window", 30*time.Second, "length of each CPU measurement")
	rounds := flag.Int("rounds", 3, "rounds of the CPU measurements (medians are reported; 0 measures the browser side alone)")
	heapFor := flag.Duration("heap-for", 3*time.Minute, "how long the page's JS heap is watched under live updates")
	flag.Parse()
	dir, err := os.MkdirTemp("", "web-cost-")
	check(err)
	defer os.RemoveAll(dir)
	gs := filepath.Join(dir, "gosleuth")
	patient := filepath.Join(dir, "patient")
	run("go", "build", "-o", gs, "./cmd/gosleuth")
	run("go", "build", "-o", patient, "./internal/web/testdata/patient")

	s, err := web.New(web.Config{})
	check(err)
	plain, gz := s.AssetSizes()
	s.Close()
	fmt.Printf("assets: %d KB plain, %d KB gzipped (goal <= 150 KB gzipped)\n", plain/1024, gz/1024)

	pat := start(patient, "alloc")
	defer stop(pat)
	port := freePort()
	srv := start(gs, "web", "--listen", "127.0.0.1:"+port)
	defer stop(srv)
	base := "http://127.0.0.1:" + port
	waitHTTP(base + "/")
	ne, neErr := exec.LookPath("prometheus-node-exporter")
	var node *exec.Cmd
	nePort := freePort()
	if neErr == nil {
		node = start(ne, "--web.listen-address=127.0.0.1:"+nePort)
		defer stop(node)
		waitHTTP("http://127.0.0.1:" + nePort + "/metrics")
	}

	pid := strconv.Itoa(pat.Process.Pid)
	type row struct{ cpu, wake []float64 }
	rows := map[string]*row{}
	order := []string{"web, no viewer", "web, 1 viewer", "web, 10 viewers", "node-exporter scraped at 1 Hz"}
	for _, k := range order {
		rows[k] = &row{}
	}
	for r := 0; r < *rounds; r++ {
		for _, k := range order {
			var cpu, wake float64
			switch k {
			case "web, no viewer":
				time.Sleep(35 * time.Second) // past the sampler's 30 s linger
				cpu, wake = measure(srv.Process.Pid, *window, nil)
			case "web, 1 viewer", "web, 10 viewers":
				n := 1
				if k == "web, 10 viewers" {
					n = 10
				}
				cpu, wake = measure(srv.Process.Pid, *window, func(ctx context.Context) { viewers(ctx, base+"/api/events?pid="+pid, n) })
			default:
				if node == nil {
					continue
				}
				cpu, wake = measure(node.Process.Pid, *window, func(ctx context.Context) { scrape(ctx, "http://127.0.0.1:"+nePort+"/metrics") })
			}
			rows[k].cpu = append(rows[k].cpu, cpu)
			rows[k].wake = append(rows[k].wake, wake)
		}
	}
	if *rounds == 0 {
		// -rounds 0: the browser measurements alone.
		firstChart()
		heap(base, pid, *heapFor)
		return
	}
	anchor := median(rows["node-exporter scraped at 1 Hz"].cpu)
	fmt.Printf("\n%-32s %14s %14s %14s\n", fmt.Sprintf("server cost (%d x %s, medians)", *rounds, *window), "% of a core", "wake-ups/s", "vs anchor")
	for _, k := range order {
		c := median(rows[k].cpu)
		ratio := "-"
		if anchor > 0 {
			ratio = fmt.Sprintf("%.2fx", c/anchor)
		}
		fmt.Printf("%-32s %14.3f %14.1f %14s\n", k, c, median(rows[k].wake), ratio)
	}
	fmt.Println("goals: <= 0.5% of a core with one viewer, <= 1% with ten, no wake-ups with none")

	firstChart()
	heap(base, pid, *heapFor)
}

// measure returns the CPU (% of a core) and voluntary context switches per
// second (summed over threads) of pid over d, while load runs.
func measure(pid int, d time.Duration, load func(context.Context)) (cpu, wake float64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if load != nil {
		wg.Add(1)
		go func() { defer wg.Done(); load(ctx) }()
		time.Sleep(2 * time.Second) // the first events and the sampler's start are not counted
	}
	t0, c0, w0 := time.Now(), cpuTicks(pid), switches(pid)
	time.Sleep(d)
	t1, c1, w1 := time.Now(), cpuTicks(pid), switches(pid)
	cancel()
	wg.Wait()
	sec := t1.Sub(t0).Seconds()
	return float64(c1-c0) / 100 / sec * 100, float64(w1-w0) / sec
}

// cpuTicks is utime+stime of pid in clock ticks (100 Hz here).
func cpuTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

// switches sums voluntary_ctxt_switches over pid's threads.
func switches(pid int) uint64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n uint64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// viewers keeps n server-sent-event streams of url open and read until ctx
// ends.
func viewers(ctx context.Context, url string, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 16<<20)
			for sc.Scan() {
			}
		}()
	}
	wg.Wait()
}

// scrape GETs url once a second until ctx ends, as Prometheus would.
func scrape(ctx context.Context, url string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var b [32 << 10]byte
			for {
				if _, err := resp.Body.Read(b[:]); err != nil {
					break
				}
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// firstChart fills an in-process server with an hour's worth of rows (3,600,
// sampled every millisecond rather than every second: the page gets the same
// data volume) and times navigation to the first chart in headless chromium,
// five times.
func firstChart() {
	s, err := web.New(web.Config{Interval: time.Millisecond, History: 3600 * time.Millisecond, Linger: time.Hour, EvalEvery: 1 << 30})
	check(err)
	defer s.Close()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	pid := strconv.Itoa(os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	viewers(ctx, ts.URL+"/api/events?pid="+pid, 1) // fills the history
	cancel()
	bctx, done := browser()
	defer done()
	var ms []float64
	var points int
	for range 5 {
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		check(chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?pid="+pid)))
		v, err := chromedp.Run(ctx, chromedp.Poll[float64](`window.gosleuthDebug && window.gosleuthDebug.firstChartMs`, chromedp.WithPollingInterval(20*time.Millisecond)))
		check(err)
		points, err = chromedp.Run(ctx, chromedp.Evaluate[int](`window.gosleuthDebug.points()`))
		check(err)
		ms = append(ms, v)
		cancel()
	}
	sort.Float64s(ms)
	fmt.Printf("\nfirst chart after navigation with %d rows of history: median %.0f ms (runs %v; goal <= 500 ms)\n", points, median(ms), round(ms))
}

// heap watches the page of pid on the real server for d under live updates
// and prints its JS heap at the start, every minute and at the end.
func heap(base, pid string, d time.Duration) {
	bctx, done := browser()
	defer done()
	ctx, cancel := context.WithTimeout(bctx, d+time.Minute)
	defer cancel()
	check(chromedp.Do(ctx, chromedp.Navigate(base+"/?pid="+pid)))
	used := func() float64 {
		runtimeGC := `(() => { if (window.gc) gc(); return performance.memory.usedJSHeapSize; })()`
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](runtimeGC))
		check(err)
		return v / 1e6
	}
	time.Sleep(5 * time.Second)
	first := used()
	fmt.Printf("\nJS heap under live updates: %.1f MB at the start", first)
	end := time.Now().Add(d)
	last := first
	for time.Now().Before(end) {
		time.Sleep(min(time.Minute, time.Until(end)))
		last = used()
		fmt.Printf(", %.1f", last)
	}
	fmt.Printf(" MB; growth %.2f MB over %s (goal <= 5 MB over 30 min)\n", last-first, d)
}

func browser() (context.Context, func()) {
	path, err := exec.LookPath("chromium")
	check(err)
	actx, c1 := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("js-flags", "--expose-gc"),
		chromedp.WindowSize(1400, 1100))
	ctx, c2 := chromedp.NewContext(actx)
	check(chromedp.Do(ctx)) // start the browser
	return ctx, func() { c2(); c1() }
}

func start(prog string, args ...string) *exec.Cmd {
	c := exec.Command(prog, args...)
	if !strings.Contains(prog, "node-exporter") {
		c.Stderr = os.Stderr // node-exporter's systemd collector logs an error per scrape here
	}
	check(c.Start())
	return c
}

func stop(c *exec.Cmd) { c.Process.Kill(); c.Wait() }

func run(prog string, args ...string) {
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		check(fmt.Errorf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out))
	}
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func waitHTTP(url string) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
	}
	check(fmt.Errorf("%s never answered", url))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x + 0.5)
	}
	return out
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "web-cost:", err)
		os.Exit(1)
	}
}
