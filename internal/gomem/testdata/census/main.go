// Command census is a patient of known shape for the runtime reader's
// tests: it parks goroutines at known sites, keeps a cache of small
// pointer-rich objects from one site, runs a periodic ticker, serves
// net/http/pprof (so the linker keeps memory profiling on) and its
// runtime/metrics on /rtm, prints its address and then stays quiet:
// no allocation, no GC, no goroutine started, so what the runtime reports
// and what the reader reads can be compared.
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

type entry struct {
	key  *string
	next *entry
	val  []byte
}

var (
	cache []*entry
	mu    sync.Mutex
	sink  []byte
)

//go:noinline
func fill(n int) {
	for i := 0; i < n; i++ {
		k := fmt.Sprint(i)
		cache = append(cache, &entry{key: &k, val: make([]byte, 48)})
	}
}

//go:noinline
func churn() {
	for i := 0; i < 2000; i++ {
		sink = make([]byte, 4096+i)
	}
}

func receiver(c chan int) { <-c }

func sleeper() { time.Sleep(time.Hour) }

func locker() { mu.Lock(); mu.Unlock() }

func selecter(a, b chan int) {
	select {
	case <-a:
	case <-b:
	}
}

func main() {
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(1 << 30)
	runtime.MemProfileRate = 4096
	c := make(chan int)
	for i := 0; i < 300; i++ {
		go receiver(c)
	}
	for i := 0; i < 120; i++ {
		go sleeper()
	}
	a, b := make(chan int), make(chan int)
	for i := 0; i < 40; i++ {
		go selecter(a, b)
	}
	mu.Lock()
	for i := 0; i < 7; i++ {
		go locker()
	}
	t := time.NewTicker(3 * time.Millisecond)
	go func() {
		for range t.C {
		}
	}()
	fill(20000)
	churn()
	runtime.GC()
	runtime.GC()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	http.HandleFunc("/rtm", func(w http.ResponseWriter, r *http.Request) {
		names := []string{"/gc/cycles/total:gc-cycles", "/gc/heap/goal:bytes", "/gc/heap/live:bytes",
			"/gc/gogc:percent", "/gc/gomemlimit:bytes", "/gc/heap/allocs:objects", "/sched/gomaxprocs:threads"}
		s := make([]metrics.Sample, len(names))
		for i, n := range names {
			s[i].Name = n
		}
		metrics.Read(s)
		out := map[string]uint64{}
		for _, x := range s {
			if x.Value.Kind() == metrics.KindUint64 {
				out[x.Name] = x.Value.Uint64()
			}
		}
		json.NewEncoder(w).Encode(out)
	})
	fmt.Println(ln.Addr())
	http.Serve(ln, nil)
}
