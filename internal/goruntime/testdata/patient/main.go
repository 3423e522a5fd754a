// Command patient is a Go program with one known runtime behaviour, for
// gosleuth's goruntime and inspect tests. It prints "ready ADDR" once
// serving, and on each SIGUSR1 one line "self {JSON}" with its own
// runtime/metrics, so tests compare what gosleuth reads with what the
// runtime says inside.
//
//	-mode idle|gc|herd|mutex|leak|godebug   the behaviour
//	-agent                          start the gosleuth agent
//	-flight                         with -agent: enable its FlightRecorder
//	-pprof                          serve net/http/pprof and expvar on 127.0.0.1:0
//	-prom                           serve client_golang /metrics (with runtime/metrics) on 127.0.0.1:0
package main

import (
	"encoding/json"
	_ "expvar"
	"flag"
	"fmt"
	oldrand "math/rand"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/agent"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var sink any

type node struct {
	next *node
	val  [4]*int
	pad  [2]int
}

func main() {
	mode := flag.String("mode", "idle", "behaviour: idle, gc, herd, mutex, leak, many, godebug")
	useAgent := flag.Bool("agent", false, "start the gosleuth agent")
	usePprof := flag.Bool("pprof", false, "serve net/http/pprof and expvar")
	useProm := flag.Bool("prom", false, "serve Prometheus /metrics")
	flight := flag.Bool("flight", false, "enable the agent's FlightRecorder")
	flag.Parse()

	addr := "-"
	if *useAgent {
		a, err := agent.Listen(agent.Options{FlightRecorder: *flight})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer a.Close()
		addr = a.Path()
	}
	if *usePprof || *useProm {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		mux := http.DefaultServeMux
		if *useProm {
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)))
			mux = http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		}
		go http.Serve(ln, mux)
		addr = "http://" + ln.Addr().String()
	}

	switch *mode {
	case "idle":
	case "gc":
		go gcHeavy()
	case "herd":
		go herd(2000, 20)
	case "mutex":
		contend(8)
	case "leak":
		go leak(200)
	case "many": // 200,000 parked goroutines, and a 1 ms ticker that notes how late it runs
		go many(200_000)
	case "godebug":
		go func() {
			// With GODEBUG=randseednop=0, each call is a non-default
			// behaviour the runtime counts.
			for {
				oldrand.Seed(1)
				time.Sleep(10 * time.Millisecond)
			}
		}()
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", *mode)
		os.Exit(2)
	}
	// Notify before saying ready: a SIGUSR1 that arrives earlier is dropped.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("ready %s\n", addr)
	for s := range sig {
		if s != syscall.SIGUSR1 {
			return
		}
		report()
	}
}

// report prints the runtime's own view of the metrics gosleuth reads.
func report() {
	names := []string{
		"/sched/goroutines:goroutines", "/sched/goroutines-created:goroutines",
		"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds",
		"/cpu/classes/gc/mark/assist:cpu-seconds", "/cpu/classes/total:cpu-seconds",
		"/cpu/classes/idle:cpu-seconds", "/sync/mutex/wait/total:seconds",
		"/gc/heap/live:bytes", "/gc/heap/goal:bytes", "/sched/gomaxprocs:threads",
		"/sched/latencies:seconds", "/gc/heap/allocs:bytes",
	}
	s := make([]metrics.Sample, len(names))
	for i := range s {
		s[i].Name = names[i]
	}
	metrics.Read(s)
	out := map[string]any{"time": time.Now().UnixNano()}
	for _, x := range s {
		switch x.Value.Kind() {
		case metrics.KindUint64:
			out[x.Name] = x.Value.Uint64()
		case metrics.KindFloat64:
			out[x.Name] = x.Value.Float64()
		case metrics.KindFloat64Histogram:
			h := x.Value.Float64Histogram()
			out[x.Name] = h.Counts // buckets are fixed; the test reads them from gosleuth's copy
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out["NumGC"] = ms.NumGC
	out["NumGoroutine"] = runtime.NumGoroutine()
	out["HeapObjects"] = ms.HeapObjects
	out["MaxTickGapNS"] = maxTickGap.Swap(0)
	b, _ := json.Marshal(out)
	fmt.Printf("self %s\n", b)
}

// maxTickGap is the longest gap between two ticks of many's 1 ms ticker
// since the last report: a stopped world shows as a gap of its length.
var maxTickGap atomic.Int64

// many parks n goroutines and runs a 1 ms ticker measuring its own gaps.
func many(n int) {
	block := make(chan struct{})
	for range n {
		go func() { <-block }()
	}
	last := time.Now()
	for now := range time.Tick(time.Millisecond) {
		if gap := now.Sub(last).Nanoseconds(); gap > maxTickGap.Load() {
			maxTickGap.Store(gap)
		}
		last = now
	}
}

// gcHeavy keeps a pointer-heavy live heap and allocates garbage in bursts,
// so GC runs several times a second and recruits mark assists.
func gcHeavy() {
	live := make([]*node, 200_000)
	for i := range live {
		live[i] = &node{}
	}
	for i := 0; ; i++ {
		// Replace some live nodes and make garbage.
		for j := 0; j < 2000; j++ {
			live[rand.IntN(len(live))] = &node{next: live[rand.IntN(len(live))]}
			sink = make([]byte, 512)
		}
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// herd parks n goroutines on a sync.Cond broadcast rate times a second:
// each wake-up makes all of them runnable at once and they queue for the
// Cond's lock.
func herd(n, rate int) {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	gen := 0
	for range n {
		go func() {
			mu.Lock()
			seen := gen
			for {
				for gen == seen {
					cond.Wait()
				}
				seen = gen
				x := 0
				for i := 0; i < 200; i++ {
					x += i
				}
				sink = x
			}
		}()
	}
	t := time.NewTicker(time.Second / time.Duration(rate))
	for range t.C {
		mu.Lock()
		gen++
		mu.Unlock()
		cond.Broadcast()
	}
}

// contend runs n goroutines that take one mutex around slow work (a
// sleep standing for I/O under the lock), so the others queue for it.
func contend(n int) {
	var mu sync.Mutex
	for range n {
		go func() {
			for {
				mu.Lock()
				time.Sleep(200 * time.Microsecond)
				mu.Unlock()
			}
		}()
	}
}

// leak starts rate goroutines a second that block forever.
func leak(rate int) {
	t := time.NewTicker(time.Second / time.Duration(rate))
	for range t.C {
		go func() { select {} }()
	}
}
