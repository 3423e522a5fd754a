// Command patient is the program compare's tests run against the real
// kernel. Its flags set one known behaviour:
//
//	-tick D -spin S    every D, spin S of CPU (a periodic worker)
//	-fanout N          every -tick, start N goroutines that each spin -spin
//	                   and wait for all (light periodic fan-out, case 5)
//	-listen ADDR       serve HTTP on ADDR; each request spins -spin and
//	                   then sleeps -delay
package main

import (
	"flag"
	"net/http"
	"sync"
	"time"
)

func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

func main() {
	tick := flag.Duration("tick", 10*time.Millisecond, "period of the periodic work")
	spinFor := flag.Duration("spin", 0, "CPU spent per tick, per fan-out goroutine or per request")
	fanout := flag.Int("fanout", 0, "goroutines started per tick")
	listen := flag.String("listen", "", "serve HTTP on this address")
	delay := flag.Duration("delay", 0, "sleep per request")
	flag.Parse()
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
