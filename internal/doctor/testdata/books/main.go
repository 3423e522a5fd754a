// Command books holds patients for the rules that read the Go runtime's
// books from the process's memory: memory held by parked goroutines, the
// live heap's holders, goroutine churn, GC against its goal and limit, and
// connections opened per request, each with controls that look alike and
// must not warn. It links net/http/pprof, so its heap profile is kept (the
// linker keeps memory profiling on). The first argument picks the
// behaviour; the program prints "ready" and, for servers, "addr HOST:PORT",
// then runs until killed.
package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // keeps the heap profile, as most servers do
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var behaviours = map[string]func(){
	// Memory held by parked goroutines.
	// A gateway: one goroutine per connection parked in Read with a 64 KB
	// buffer of its own, 4,000 connections.
	"gateway": func() { gateway(4000, 64<<10) },
	// A push server: a reader and a writer goroutine per connection, each
	// with a 32 KB bufio buffer, 3,000 connections.
	"pushserver": pushServer,
	// Controls: a gateway with few connections; 2,000 goroutines doing
	// work (hashing a request every 100 ms each).
	"fewconns": func() { gateway(20, 64<<10) },
	"workers":  workers,

	// The live heap's holders.
	// 1.5 M pointer-rich cache entries under request churn.
	"ptrcache": func() { ptrCache(1_500_000); churn(2, 64) },
	// A feature cache of 800 k pointer-rich entries rebuilt at once every
	// two seconds (the whole cache expires together), under light churn.
	"expirycache": expiryCache,
	// 2 M pointer-rich records loaded once, little allocation after: the
	// holder is named, as information (the GC is cheap).
	"catalog": catalog,
	// Control: the same entries as ptrcache in a pointer-free cache (an
	// arena of bytes and a map of integers), same churn.
	"pfcache": func() { pfCache(1_500_000); churn(2, 64) },

	// Goroutine churn.
	// A goroutine per item, about 50,000 a second.
	"spawner": spawner,
	// A handler that fans each request out to 16 goroutines.
	"fanout": func() { serve(fanoutHandler) },
	// Control: the same items through a pool of 4 workers.
	"pool": pool,

	// GC against goal and limit.
	// A live heap of 90 MB under a 100 MiB memory limit (GOMEMLIMIT set by
	// the test), allocating.
	"gclimit": func() { live = make([]byte, 90<<20); touch(live); churn(1, 256) },
	// GOGC=10 (set by the test) with a 20 MB live map.
	"gogclow": func() { smallMap(200_000); churn(1, 256) },
	// Allocating pointer trees on two goroutines: a quarter of a busy
	// process's CPU in GC.
	"gcbusy": gcBusy,
	// Control: a batch job hashing its input, allocating a result per
	// block: busy, with the GC an ordinary share of it.
	"batch": batch,

	// Connections.
	// A client that builds an http.Client and Transport per request
	// (closing its idle connections after), 300 requests a second.
	"dialhttp": func() { dialHTTP(childServer("child-http"), 300) },
	// A client that dials per request to a line echo service.
	"dialraw": func() { dialRaw(childServer("child-echo"), 500) },
	// A server whose client (a child process) dials per request: the
	// server is told its clients do not reuse connections.
	"shortserver": shortServer,
	// A shared http.Client whose Transport keeps 2 idle connections per
	// host (the default) used by 16 goroutines at once: most requests
	// find no idle connection, and most connections are closed after
	// one request because the idle pool is full.
	"idlecap": func() { burstHTTP(childServer("child-http"), 16) },
	// Control: one shared http.Client, its idle pool sized to the
	// concurrency, at the same rate as dialhttp.
	"reuse": func() { reuseHTTP(childServer("child-http"), 300) },

	// Children, started by the behaviours above.
	"child-http":      func() { serve(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }) },
	"child-echo":      childEcho,
	"child-dialer":    func() { dialHTTP(os.Getenv("BOOKS_TARGET"), 300) },
	"child-keepalive": func() { reuseHTTP(os.Getenv("BOOKS_TARGET"), 300) },
}

func main() {
	if len(os.Args) != 2 || behaviours[os.Args[1]] == nil {
		log.Fatalf("usage: books BEHAVIOUR (one of %d)", len(behaviours))
	}
	behaviours[os.Args[1]]()
	fmt.Println("ready")
	select {}
}

func listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	return ln
}

func serve(h http.HandlerFunc) {
	ln := listen()
	fmt.Println("addr", ln.Addr())
	go http.Serve(ln, h)
}

var (
	held    []net.Conn
	live    []byte
	sink    atomic.Pointer[[]*node]
	handled atomic.Int64
)

// gateway accepts conns connections from itself and reads each in a
// goroutine of its own with a buffer of size bytes.
func gateway(conns, size int) {
	ln := listen()
	go accept(ln, func(c net.Conn) { go handleConn(c, size) })
	dialAll(ln, conns)
	for handled.Load() < int64(conns) {
		time.Sleep(10 * time.Millisecond)
	}
	trickle()
}

// accept hands each connection ln accepts to handle, until ln fails.
func accept(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		handle(c)
	}
}

func handleConn(c net.Conn, size int) {
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1 // filled once by earlier traffic
	}
	handled.Add(1)
	for {
		if _, err := c.Read(buf); err != nil {
			c.Close()
			return
		}
	}
}

func dialAll(ln net.Listener, n int) {
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, c)
	}
}

// trickle writes a line to a random connection ten times a second. It
// first runs two GC cycles, as a gateway up for a while has: the heap
// profile publishes what was allocated only at the end of the cycle after.
func trickle() {
	runtime.GC()
	runtime.GC()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		for range t.C {
			held[rand.IntN(len(held))].Write([]byte("ping\n"))
		}
	}()
}

type session struct {
	c   net.Conn
	out chan []byte
}

func pushServer() {
	ln := listen()
	go accept(ln, func(c net.Conn) {
		s := &session{c: c, out: make(chan []byte, 8)}
		go s.readLoop()
		go s.writeLoop()
	})
	const conns = 3000
	dialAll(ln, conns)
	for handled.Load() < 2*conns {
		time.Sleep(10 * time.Millisecond)
	}
	trickle()
}

func (s *session) readLoop() {
	r := bufio.NewReaderSize(s.c, 32<<10)
	handled.Add(1)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			close(s.out)
			return
		}
		s.out <- append([]byte(nil), line...)
	}
}

func (s *session) writeLoop() {
	w := bufio.NewWriterSize(s.c, 32<<10)
	handled.Add(1)
	for m := range s.out {
		w.Write(m)
		w.Flush()
	}
}

func workers() {
	for i := range 2000 {
		go func() {
			buf := []byte(strconv.Itoa(i))
			t := time.NewTicker(100 * time.Millisecond)
			for range t.C {
				sum := sha256.Sum256(buf)
				buf = append(buf[:0], sum[:4]...)
			}
		}()
	}
}

type user struct {
	name  string
	email string
}

type entry struct {
	key   string
	tags  []string
	owner *user
	next  *entry
}

var ptrMap map[string]*entry

func ptrCache(n int) {
	ptrMap = make(map[string]*entry, n)
	var prev *entry
	for i := range n {
		k := "user:" + strconv.Itoa(i)
		e := &entry{key: k, tags: []string{"a", k[5:]}, owner: &user{name: k, email: k + "@example.com"}, next: prev}
		ptrMap[k] = e
		prev = e
	}
}

// arena and index hold pfCache's entries without a pointer the GC must
// follow: the bytes in one slice, their offsets in a map of integers.
var (
	arena []byte
	index map[uint64]uint32
)

func pfCache(n int) {
	index = make(map[uint64]uint32, n)
	arena = make([]byte, 0, n*48)
	for i := range n {
		k := "user:" + strconv.Itoa(i)
		index[uint64(i)] = uint32(len(arena))
		arena = append(arena, k...)
		arena = append(arena, "@example.com;a;"...)
		arena = append(arena, k[5:]...)
		arena = append(arena, '\n')
	}
}

// churn allocates short-lived request-like garbage on g goroutines, size
// bytes an object, a few hundred MB a second in all.
func churn(g, size int) {
	for range g {
		go func() {
			var keep [][]byte
			for i := 0; ; i++ {
				b := make([]byte, size)
				b[0] = byte(i)
				keep = append(keep, b)
				if len(keep) == 64 {
					keep = keep[:0]
				}
				if i%4096 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
}

var expiring atomic.Pointer[map[string]*entry]

func expiryCache() {
	build := func() {
		m := make(map[string]*entry, 800_000)
		for i := range 800_000 {
			k := "feature:" + strconv.Itoa(i)
			m[k] = &entry{key: k, tags: []string{k[8:], "x"}, owner: &user{name: k}}
		}
		expiring.Store(&m)
	}
	build()
	go func() {
		for {
			time.Sleep(2 * time.Second)
			build() // every entry expires together
		}
	}()
	churn(1, 128)
}

type record struct {
	id    int
	name  string
	attrs map[string]string
	prev  *record
}

var records []*record

func catalog() {
	records = make([]*record, 0, 2_000_000)
	var prev *record
	for i := range 2_000_000 {
		r := &record{id: i, name: "item-" + strconv.Itoa(i), prev: prev}
		records = append(records, r)
		prev = r
	}
	runtime.GC()
	// A few reads a second, no allocation.
	go func() {
		for {
			time.Sleep(100 * time.Millisecond)
			_ = records[rand.IntN(len(records))].name
		}
	}()
}

func touch(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}

var small map[int]*user

func smallMap(n int) {
	small = make(map[int]*user, n)
	for i := range n {
		small[i] = &user{name: strconv.Itoa(i)}
	}
}

type node struct {
	left, right *node
	val         int
}

func tree(d int) *node {
	if d == 0 {
		return &node{val: d}
	}
	return &node{left: tree(d - 1), right: tree(d - 1), val: d}
}

func gcBusy() {
	// A live set of 400 k nodes, replaced a piece at a time.
	keep := make([]*node, 200)
	for i := range keep {
		keep[i] = tree(11)
	}
	s := keep
	sink.Store(&s)
	for g := range 2 {
		go func() {
			for i := g; ; i += 2 {
				keep[i%len(keep)] = tree(11)
				sum := 0
				for range 40 {
					t := tree(6)
					sum += t.val
				}
			}
		}()
	}
}

func batch() {
	for g := range 2 {
		go func() {
			block := make([]byte, 64<<10)
			var results []string
			for i := 0; ; i++ {
				block[i%len(block)] = byte(g + i)
				sum := sha256.Sum256(block)
				results = append(results, fmt.Sprintf("%x", sum[:8]))
				if len(results) == 4096 {
					results = results[:0]
				}
			}
		}()
	}
}

var spawned atomic.Int64

// item is a unit of work: hashing 64 bytes, a couple of microseconds.
func item(i int) {
	var b [64]byte
	b[0] = byte(i)
	sum := sha256.Sum256(b[:])
	spawned.Add(int64(sum[0] & 1))
}

func spawner() {
	go func() {
		var wg sync.WaitGroup
		for {
			for i := range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					item(i)
				}()
			}
			wg.Wait()
		}
	}()
}

func pool() {
	jobs := make(chan int, 256)
	for range 4 {
		go func() {
			for i := range jobs {
				item(i)
			}
		}()
	}
	go func() {
		for i := 0; ; i++ {
			jobs <- i
		}
	}()
}

func fanoutHandler(w http.ResponseWriter, r *http.Request) {
	parts := make(chan int, 16)
	for i := range 16 {
		go func() { parts <- len(r.URL.Path) * i }()
	}
	sum := 0
	for range 16 {
		sum += <-parts
	}
	fmt.Fprintln(w, sum)
}

// childServer starts this program in a child behaviour that prints its
// address, and returns the address.
func childServer(behaviour string, env ...string) string {
	cmd := exec.Command(os.Args[0], behaviour)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	addr := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "addr" {
			addr = f[1]
		}
		if len(f) == 1 && f[0] == "ready" {
			go io.Copy(io.Discard, out)
			return addr
		}
	}
	log.Fatalf("child %s ended before it was ready", behaviour)
	return ""
}

// every calls f rate times a second on 4 goroutines.
func every(rate int, f func()) {
	per := time.Second * 4 / time.Duration(rate)
	for range 4 {
		go func() {
			t := time.NewTicker(per)
			for range t.C {
				f()
			}
		}()
	}
}

func dialHTTP(addr string, rate int) {
	every(rate, func() {
		// A client and a transport per request: no connection is reused.
		client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
		defer client.CloseIdleConnections()
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
}

var shared = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}

// burstHTTP sends requests from n goroutines at once through the default
// client, pausing a little between rounds.
func burstHTTP(addr string, n int) {
	for range n {
		go func() {
			for {
				resp, err := http.Get("http://" + addr + "/")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
}

func reuseHTTP(addr string, rate int) {
	every(rate, func() {
		resp, err := shared.Get("http://" + addr + "/")
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
}

func dialRaw(addr string, rate int) {
	every(rate, func() {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("GET key\n")); err != nil {
			return
		}
		bufio.NewReader(c).ReadString('\n')
	})
}

func childEcho() {
	ln := listen()
	fmt.Println("addr", ln.Addr())
	go accept(ln, func(c net.Conn) {
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				c.Write([]byte("value " + line))
			}
		}()
	})
}

func shortServer() {
	ln := listen()
	fmt.Println("addr", ln.Addr())
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	childServer("child-dialer", "BOOKS_TARGET="+ln.Addr().String())
}
