// Command hedge-tail measures what hedged requests do to tail latency and
// to the load a server sees. It runs an open-loop client at a fixed rate
// (latency measured from each request's intended send time, so a stalled
// client cannot hide queueing) against two loopback servers:
//
//   - tail: 1 ms of work, plus 20-60 ms for 3% of requests, unlimited
//     concurrency, at 1,000 req/s;
//   - capacity: 4 workers x 2 ms of work that cannot be cancelled once
//     started (queued requests are dropped when cancelled), at 1,500 req/s,
//     75% of the nominal 2,000 req/s; on a 2-core VM a "2 ms" sleep
//     takes 2.3-2.45 ms, which makes it 87-92% (the server util column
//     shows the real load).
//
// Each server runs in a child process of its own by default (-server
// process), as a real backend would: the "2 ms of work" of the capacity
// scenario is a Go timer, and in the client's process it runs late
// whenever the client arms timers of its own (on a 2-core VM, a wrapper
// that only armed and stopped a 5 ms timer per request raised the
// server's load from 91% to 94-97% and its P99 several-fold), which
// charged the client's timers to the server's capacity. -server inprocess
// keeps the old layout.
//
// For each it compares no hedging, package hedge with a fixed 5 ms delay,
// package hedge with its adaptive default, and cristalhq/hedgedhttp
// (Upto 2, Delay 5 ms), and prints P50, P99, P99.9 and the extra load the
// server measured (requests received / requests sent - 1).
//
// Usage:
//
//	go run . [-duration 15s] [-rounds 3] [-warmup 1s] [-scenario all|tail|capacity] [-modes none,fixed,adaptive,hedgedhttp]
//	         [-tail-rate 1000] [-capacity-rate 1500] [-server process|inprocess] [-cpuprofile file]
//
// Mode noop goes through package hedge with a delay that never fires, to
// show the cost of the wrapper alone.
//
// The delay column lists the hedge delay at the end of each round.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cristalhq/hedgedhttp"
	"github.com/gosleuth/gosleuth/hedge"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "hedge-tail: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	duration time.Duration
	warmup   time.Duration
	scenario string
	modes    string
	rounds   int
	server   string
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("hedge-tail", flag.ContinueOnError)
	var o options
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "measured time per case")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before each case, so adaptive delays settle")
	fs.StringVar(&o.scenario, "scenario", "all", "all, tail or capacity")
	fs.StringVar(&o.modes, "modes", "none,fixed,adaptive,hedgedhttp", "comma-separated client modes: none, noop, fixed, adaptive, hedgedhttp")
	fs.IntVar(&scenarios[0].rate, "tail-rate", scenarios[0].rate, "requests per second in the tail scenario")
	fs.IntVar(&scenarios[1].rate, "capacity-rate", scenarios[1].rate,
		"requests per second in the capacity scenario (nominal capacity 2,000/s; see the server util column for the real load)")
	fs.IntVar(&o.rounds, "rounds", 3, "split each case into this many segments, run the modes in turn, so that noise on a shared machine falls on all of them")
	fs.StringVar(&o.server, "server", "process", "where the scenario servers run: process (a child process each) or inprocess")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	serve := fs.String("serve-child", "", "run as the server process of this scenario (used by -server process)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serve != "" {
		return serveChild(*serve)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var scs []scenario
	for _, sc := range scenarios {
		if o.scenario == "all" || o.scenario == sc.name {
			scs = append(scs, sc)
		}
	}
	if len(scs) == 0 {
		return fmt.Errorf("unknown scenario %q", o.scenario)
	}
	modes := strings.Split(o.modes, ",")
	for _, m := range modes {
		if _, ok := clientModes[m]; !ok {
			return fmt.Errorf("unknown mode %q", m)
		}
	}

	fmt.Fprintf(out, "hedge-tail: %v measured per case in %d rounds, each after %v of warm-up; latency from intended send time; servers %s\n\n",
		o.duration, o.rounds, o.warmup, map[string]string{"process": "in a child process", "inprocess": "in the client's process"}[o.server])
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tsent\tP50 ms\tP99 ms\tP99.9 ms\tmax ms\tP99 by round ms\terrors\tserver extra\texecuted extra\thedges\twon\tdenied\tdelay\tnew conns\tserver util\t")
	if o.rounds < 1 {
		return fmt.Errorf("-rounds %d: must be at least 1", o.rounds)
	}
	results := map[string]map[string]result{}
	for _, sc := range scs {
		res := map[string]result{}
		for round := range o.rounds {
			for _, m := range modes {
				r, err := runCase(sc, m, o.server, o.warmup, o.duration/time.Duration(o.rounds))
				if err != nil {
					return fmt.Errorf("case %s/%s: %w", sc.name, m, err)
				}
				res[m] = res[m].add(r)
				fmt.Fprintf(os.Stderr, "done: %s/%s round %d\n", sc.name, m, round+1)
			}
		}
		results[sc.name] = res
		for _, m := range modes {
			r := res[m]
			fmt.Fprintf(tw, "%s@%d/s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.1f\t%s\t%d\t%+.2f%%\t%+.2f%%\t%d\t%d\t%s\t%s\t%d\t%s\t\n",
				sc.name, sc.rate, m, r.sent, ms(r.hist.ValueAtQuantile(50)), ms(r.hist.ValueAtQuantile(99)),
				ms(r.hist.ValueAtQuantile(99.9)), ms(r.hist.Max()), r.roundP99s(), r.errors,
				100*r.extra(), 100*r.executedExtra(), r.hedges, r.won, r.denied, r.delay, r.conns, r.util())
		}
	}
	tw.Flush()
	fmt.Fprintln(out)
	checkGoals(out, results)
	return nil
}

func ms(us int64) float64 { return float64(us) / 1000 }

// scenario is a server behaviour and the rate it is driven at.
type scenario struct {
	name    string
	rate    int
	handler func(s *server) http.HandlerFunc
}

var scenarios = []scenario{
	{name: "tail", rate: 1000, handler: tailHandler},
	{name: "capacity", rate: 1500, handler: capacityHandler},
}

// server counts what reached it.
type server struct {
	received, executed, dropped atomic.Int64
	conns                       atomic.Int64 // connections opened
	busy                        atomic.Int64 // ns workers were held (capacity only)
	sem                         chan struct{}
}

// tailHandler: 1 ms of work, 3% of requests 20-60 ms more; stops early when
// the client cancels.
func tailHandler(s *server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.received.Add(1)
		d := time.Millisecond
		if rand.Float64() < 0.03 {
			d += 20*time.Millisecond + rand.N(40*time.Millisecond)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			s.executed.Add(1)
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
			s.dropped.Add(1)
		}
	}
}

// capacityHandler: 4 workers, 2 ms each, not cancellable once started; a
// request still queued when its client cancels is dropped.
func capacityHandler(s *server) http.HandlerFunc {
	s.sem = make(chan struct{}, 4)
	return func(w http.ResponseWriter, r *http.Request) {
		s.received.Add(1)
		select {
		case s.sem <- struct{}{}:
		case <-r.Context().Done():
			s.dropped.Add(1)
			return
		}
		start := time.Now()
		time.Sleep(2 * time.Millisecond)
		s.busy.Add(int64(time.Since(start)))
		<-s.sem
		s.executed.Add(1)
		_, _ = io.WriteString(w, "ok")
	}
}

// clientMode builds the RoundTripper under test over base, and a function
// that reads its counters.
type clientMode func(base http.RoundTripper) (http.RoundTripper, func() (hedges, won int64, denied, delay string))

var clientModes = map[string]clientMode{
	"none": func(base http.RoundTripper) (http.RoundTripper, func() (int64, int64, string, string)) {
		return base, func() (int64, int64, string, string) { return 0, 0, "-", "-" }
	},
	"fixed": func(base http.RoundTripper) (http.RoundTripper, func() (int64, int64, string, string)) {
		t := hedge.NewTransport(base, hedge.WithDelay(5*time.Millisecond))
		return t, hedgeStats(t)
	},
	// noop goes through package hedge with a delay that never fires: the
	// cost of the wrapper alone.
	"noop": func(base http.RoundTripper) (http.RoundTripper, func() (int64, int64, string, string)) {
		t := hedge.NewTransport(base, hedge.WithDelay(time.Hour))
		return t, hedgeStats(t)
	},
	"adaptive": func(base http.RoundTripper) (http.RoundTripper, func() (int64, int64, string, string)) {
		t := hedge.NewTransport(base)
		return t, hedgeStats(t)
	},
	"hedgedhttp": func(base http.RoundTripper) (http.RoundTripper, func() (int64, int64, string, string)) {
		c, err := hedgedhttp.New(hedgedhttp.Config{Transport: base, Upto: 2, Delay: 5 * time.Millisecond})
		if err != nil {
			panic(err)
		}
		st := c.Stats()
		return c, func() (int64, int64, string, string) {
			return int64(st.ActualRoundTrips()) - int64(st.RequestedRoundTrips()), int64(st.HedgedRequestWins()), "-", "5ms"
		}
	},
}

func hedgeStats(t *hedge.Transport) func() (int64, int64, string, string) {
	return func() (int64, int64, string, string) {
		s := t.Stats()
		var parts []string
		for _, r := range hedge.Reasons() {
			if n := s.Denied[r]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", r, n))
			}
		}
		if len(parts) == 0 {
			parts = []string{"0"}
		}
		return int64(s.Hedges), int64(s.HedgesWon), strings.Join(parts, ","), s.Delay.Round(10 * time.Microsecond).String()
	}
}

type result struct {
	hist                      *hdrhistogram.Histogram
	sent, errors              int64
	received, executed, conns int64
	busy, workerTime          time.Duration // worker time used and available
	hedges, won               int64
	denied, delay             string
	roundP99                  []float64 // ms, one per round
}

// roundP99s lists the P99 of each round, to tell a case that is slow
// throughout from one where a single round hit a queue burst.
func (r result) roundP99s() string {
	parts := make([]string, len(r.roundP99))
	for i, v := range r.roundP99 {
		parts[i] = fmt.Sprintf("%.1f", v)
	}
	return strings.Join(parts, " ")
}

// medianRoundP99 is the median of the rounds' P99s.
func (r result) medianRoundP99() float64 {
	v := slices.Clone(r.roundP99)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// extra is the load the server saw beyond the requests sent.
func (r result) extra() float64 { return float64(r.received)/float64(r.sent) - 1 }

// executedExtra is the work the server did beyond the requests sent.
func (r result) executedExtra() float64 { return float64(r.executed)/float64(r.sent) - 1 }

// add merges the result of another segment of the same case.
func (r result) add(o result) result {
	if r.hist == nil {
		return o
	}
	r.hist.Merge(o.hist)
	r.sent += o.sent
	r.errors += o.errors
	r.received += o.received
	r.executed += o.executed
	r.conns += o.conns
	r.busy += o.busy
	r.workerTime += o.workerTime
	r.hedges += o.hedges
	r.won += o.won
	r.denied = mergeDenied(r.denied, o.denied)
	r.delay += " " + o.delay
	r.roundP99 = append(r.roundP99, o.roundP99...)
	return r
}

// mergeDenied adds up two "reason=n,..." lists.
func mergeDenied(a, b string) string {
	if a == "-" {
		return b
	}
	sum := map[string]int{}
	var order []string
	for _, list := range []string{a, b} {
		for _, kv := range strings.Split(list, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			var n int
			fmt.Sscan(v, &n)
			if _, seen := sum[k]; !seen {
				order = append(order, k)
			}
			sum[k] += n
		}
	}
	if len(order) == 0 {
		return "0"
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s=%d", k, sum[k])
	}
	return strings.Join(parts, ",")
}

// util is the share of worker time the server used, with the mean time a
// worker was held ("2 ms" of work takes longer when timers are late).
func (r result) util() string {
	if r.workerTime == 0 || r.executed == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%% (%.2f ms/req)", 100*float64(r.busy)/float64(r.workerTime),
		float64(r.busy.Microseconds())/1000/float64(r.executed))
}

// runCase runs one segment of a case on a fresh server and client: warmup
// of unmeasured load, then d of measured load.
func runCase(sc scenario, mode, where string, warmup, d time.Duration) (result, error) {
	be, err := startBackend(sc, where)
	if err != nil {
		return result{}, err
	}
	defer be.close()

	base := &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: time.Minute}
	defer base.CloseIdleConnections()
	rt, stats := clientModes[mode](base)
	url := be.url()

	// Warm-up, unmeasured: connections open and adaptive delays settle.
	if warmup > 0 {
		load(rt, url, sc.rate, warmup, nil)
	}
	h0, w0, _, _ := stats()
	s0, err := be.stats()
	if err != nil {
		return result{}, err
	}
	res := result{hist: hdrhistogram.New(1, 60_000_000, 3)}
	res.sent, res.errors = load(rt, url, sc.rate, d, res.hist)
	s1, err := be.stats()
	if err != nil {
		return result{}, err
	}
	res.received, res.executed = s1.Received-s0.Received, s1.Executed-s0.Executed
	res.conns = s1.Conns - s0.Conns
	if s1.Workers > 0 {
		res.busy = time.Duration(s1.BusyNs - s0.BusyNs)
		res.workerTime = time.Duration(s1.Workers) * d
	}
	h1, w1, denied, delay := stats()
	res.hedges, res.won, res.denied, res.delay = h1-h0, w1-w0, denied, delay
	res.roundP99 = []float64{ms(res.hist.ValueAtQuantile(99))}
	return res, nil
}

// load sends GETs at rate per second for d, each from its own goroutine at
// its intended time, and waits for all of them. It records each latency,
// measured from the intended send time, in hist when hist is not nil.
func load(rt http.RoundTripper, url string, rate int, d time.Duration, hist *hdrhistogram.Histogram) (sent, errs int64) {
	client := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errCount atomic.Int64
	start := time.Now()
	for i := range n {
		intended := start.Add(time.Duration(i) * interval)
		if w := time.Until(intended); w > 0 {
			time.Sleep(w)
		}
		wg.Go(func() {
			err := get(client, url)
			lat := time.Since(intended)
			if err != nil {
				errCount.Add(1)
			}
			if hist != nil {
				mu.Lock()
				_ = hist.RecordValue(lat.Microseconds())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return int64(n), errCount.Load()
}

func get(c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("new request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// checkGoals prints the goals of issue 8 against the results.
func checkGoals(out io.Writer, res map[string]map[string]result) {
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	if tail, ok := res["tail"]; ok {
		for _, m := range []string{"fixed", "adaptive"} {
			r, ok := tail[m]
			if !ok {
				continue
			}
			p99, p999 := ms(r.hist.ValueAtQuantile(99)), ms(r.hist.ValueAtQuantile(99.9))
			fmt.Fprintf(out, "goal tail/%s: P99 %.2f <= 10 ms, P99.9 %.2f <= 15 ms, extra %.2f%% <= 5%%: %s\n",
				m, p99, p999, 100*r.extra(), verdict(p99 <= 10 && p999 <= 15 && r.extra() <= 0.05))
		}
	}
	if capa, ok := res["capacity"]; ok {
		none, hasNone := capa["none"]
		for _, m := range []string{"fixed", "adaptive"} {
			r, ok := capa[m]
			if !ok || !hasNone {
				continue
			}
			p99, base := ms(r.hist.ValueAtQuantile(99)), ms(none.hist.ValueAtQuantile(99))
			fmt.Fprintf(out, "goal capacity/%s: extra %.2f%% <= 5%%, P99 %.2f <= 2 x %.2f ms: %s (median round P99 %.2f vs %.2f ms)\n",
				m, 100*r.extra(), p99, base, verdict(r.extra() <= 0.05 && p99 <= 2*base), r.medianRoundP99(), none.medianRoundP99())
		}
	}
}
