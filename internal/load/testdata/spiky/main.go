// Command spiky is a server whose P99 spikes come from one cause, chosen
// with -cause:
//
//   - gc: GC bursts. It keeps a cache of many small pointer-rich entries
//     that expires all at once every -every and is filled again at once.
//     Each refill allocates a whole cache while the old one is still held,
//     so the cycles it triggers mark a large heap of pointers, and the
//     handlers, which allocate -alloc bytes a request, are made to assist.
//     Between refills the heap is stable and the GC quiet.
//   - lock: every handler takes one mutex for a moment, and every -every a
//     job holds it for -hold (sleeping, allocating nothing), so the
//     requests that arrive meanwhile wait.
//   - sleep: the requests that arrive in the first -slot of every -every
//     sleep -hold before answering (a periodic slow path).
//
// Outside the gc cause its GC is that of any small server. It prints
// "listening on ADDR" once it serves.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// entry is one cached item: several pointers, so marking it is work.
type entry struct {
	key   string
	tags  []string
	next  *entry
	value *[4]int64
}

type cache struct {
	m    map[int]*entry
	head *entry
}

func build(n int) *cache {
	c := &cache{m: make(map[int]*entry, n)}
	for i := 0; i < n; i++ {
		e := &entry{key: strconv.Itoa(i), tags: []string{"a", strconv.Itoa(i & 1023)}, next: c.head, value: &[4]int64{int64(i)}}
		c.m[i] = e
		c.head = e
	}
	return c
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	cause := flag.String("cause", "gc", "what makes the spikes: gc, lock or sleep")
	n := flag.Int("entries", 600_000, "gc: cache entries")
	alloc := flag.Int("alloc", 65536, "gc: bytes a request allocates for its response")
	every := flag.Duration("every", 0, "the period of the cause (gc: 1.5s; lock, sleep: 700ms)")
	hold := flag.Duration("hold", 40*time.Millisecond, "lock: how long the job holds the lock; sleep: how long a slow request sleeps")
	slot := flag.Duration("slot", 30*time.Millisecond, "sleep: how long, from the start of each period, requests take the slow path")
	flag.Parse()
	if *every == 0 {
		*every = map[string]time.Duration{"gc": 1500 * time.Millisecond}[*cause]
		if *every == 0 {
			*every = 700 * time.Millisecond
		}
	}
	var h http.HandlerFunc
	switch *cause {
	case "gc":
		var cur atomic.Pointer[cache]
		cur.Store(build(*n))
		go func() {
			for range time.Tick(*every) {
				cur.Store(&cache{m: map[int]*entry{}}) // everything expires at once
				cur.Store(build(*n))
			}
		}()
		h = func(w http.ResponseWriter, r *http.Request) {
			k := rand.IntN(1 << 20)
			v := int64(-1)
			if e := cur.Load().m[k]; e != nil {
				v = e.value[0]
			}
			buf := make([]byte, 0, *alloc) // a response built per request
			w.Write(fmt.Appendf(buf, "key %d value %d\n", k, v))
		}
	case "lock":
		var mu sync.Mutex
		count := 0
		go func() {
			for range time.Tick(*every) {
				mu.Lock()
				time.Sleep(*hold)
				mu.Unlock()
			}
		}()
		h = func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			count++
			c := count
			mu.Unlock()
			fmt.Fprintf(w, "request %d\n", c)
		}
	case "sleep":
		start := time.Now()
		h = func(w http.ResponseWriter, r *http.Request) {
			if time.Since(start)%*every < *slot {
				time.Sleep(*hold)
			}
			fmt.Fprintln(w, "hello")
		}
	default:
		fmt.Fprintln(os.Stderr, "-cause: gc, lock or sleep")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", ln.Addr())
	http.Serve(ln, h)
}
