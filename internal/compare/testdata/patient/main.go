// Command patient is the program compare's tests run against the real
// kernel. Its flags set one known behaviour:
//
//	-tick D -spin S    every D, spin S of CPU (a periodic worker)
//	-fanout N          every -tick, start N goroutines that each spin -spin
//	                   and wait for all (light periodic fan-out, case 5)
//	-listen ADDR       serve HTTP on ADDR; each request spins -spin and
//	                   then sleeps -delay
//	-iters N           spin N loop iterations instead of -spin's wall time:
//	                   a fixed amount of work, which preemption cannot
//	                   shorten (a wall-time spin preempted spins less CPU)
package main

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// spin busies the CPU for d of wall time (or, with -iters, a fixed number
// of iterations).
var spin = func(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// sink keeps the work loop from being optimised away.
var sink uint64

// work runs n iterations of a cheap mixing step.
func work(n int) {
	x := sink
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink = x
}

func main() {
	tick := flag.Duration("tick", 10*time.Millisecond, "period of the periodic work")
	spinFor := flag.Duration("spin", 0, "CPU spent per tick, per fan-out goroutine or per request")
	fanout := flag.Int("fanout", 0, "goroutines started per tick")
	listen := flag.String("listen", "", "serve HTTP on this address")
	delay := flag.Duration("delay", 0, "sleep per request")
	iters := flag.Int("iters", 0, "loop iterations per tick, fan-out goroutine or request, instead of -spin")
	calibrate := flag.Bool("calibrate", false, "print the median nanoseconds of 10 million iterations of -iters' loop over 7 runs, and exit")
	flag.Parse()
	if *calibrate {
		var ns []int64
		for range 7 {
			t0 := time.Now()
			work(10_000_000)
			ns = append(ns, time.Since(t0).Nanoseconds())
		}
		slices.Sort(ns)
		fmt.Println(ns[len(ns)/2])
		return
	}
	if *iters > 0 {
		n := *iters
		spin = func(time.Duration) { work(n) }
	}
	if *listen != "" {
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			spin(*spinFor)
			if *delay > 0 {
				time.Sleep(*delay)
			}
			w.Write([]byte("ok\n"))
		})
		if err := http.ListenAndServe(*listen, nil); err != nil {
			panic(err)
		}
		return
	}
	t := time.NewTicker(*tick)
	for range t.C {
		if *fanout == 0 {
			spin(*spinFor)
			continue
		}
		var wg sync.WaitGroup
		for range *fanout {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spin(*spinFor)
			}()
		}
		wg.Wait()
	}
}
