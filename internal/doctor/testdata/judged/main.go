// Command judged holds a second round of patients for the rules that read
// the runtime's books and the connection rule, written after those rules'
// thresholds were set, in other shapes than testdata/books: the rules are
// judged on them, not tuned on them. The first argument picks the
// behaviour; the program prints "ready" (and "addr HOST:PORT" for servers)
// and runs until killed.
package main

import (
	"bufio"
	"container/list"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof" // keeps the heap profile
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var behaviours = map[string]func(){
	// A TCP proxy: two io.Copy goroutines per connection pair, each with
	// io.Copy's own 32 KB buffer, 2,500 idle client connections.
	"proxy": proxy,
	// An LRU cache (container/list of pointer entries and a map of string
	// keys) of 1.2 M entries, looked up and refreshed by 4 goroutines.
	"lru": lru,
	// Control: 6 M scores in a slice of pointer-free structs, read and
	// updated by 4 goroutines.
	"scores": scores,
	// A log shipper that hands every line to a new goroutine.
	"logship": logShip,
	// A client with keep-alive disabled on its transport, 200 requests a
	// second to a child server.
	"nokeepalive": func() { client(&http.Transport{DisableKeepAlives: true}, childHTTP(), 200, true) },
	// A client that closes each response without reading its body: the
	// transport cannot reuse the connection.
	"unreadbody": func() { client(&http.Transport{}, childHTTP(), 200, false) },
	// Control: a client reading every body over a shared transport.
	"keepalive": func() { client(&http.Transport{MaxIdleConnsPerHost: 16}, childHTTP(), 200, true) },
	// A batch job run with GOGC=off and GOMEMLIMIT (set by the test) just
	// above its working set.
	"limitbatch": limitBatch,
	// Control: 3,000 idle keep-alive connections to an HTTP server (each
	// a parked net/http connection goroutine with its bufio buffers).
	"idleconns": idleConns,

	"child-http": func() {
		ln := listen()
		fmt.Println("addr", ln.Addr())
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat("x", 2048))
		}))
	},
}

func main() {
	if len(os.Args) != 2 || behaviours[os.Args[1]] == nil {
		log.Fatalf("usage: judged BEHAVIOUR (one of %d)", len(behaviours))
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

var keep []net.Conn

func proxy() {
	backend := listen()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			keep = append(keep, c)
		}
	}()
	front := listen()
	go func() {
		for {
			c, err := front.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", backend.Addr().String())
			if err != nil {
				log.Fatal(err)
			}
			// Copies through buffers of their own (counting bytes, as
			// proxies do, which also keeps io.Copy from splicing).
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	for range 2500 {
		c, err := net.Dial("tcp", front.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		keep = append(keep, c)
	}
	time.Sleep(2 * time.Second)
}

var copied atomic.Int64

func pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		copied.Add(int64(n))
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

type item struct {
	key   string
	value []byte
	tags  map[string]string
}

func lru() {
	l := list.New()
	idx := make(map[string]*list.Element, 1_200_000)
	for i := range 1_200_000 {
		k := "sku-" + strconv.Itoa(i)
		idx[k] = l.PushFront(&item{key: k, value: []byte(k)})
	}
	var mu sync.Mutex
	for g := range 4 {
		go func() {
			for i := g; ; i += 4 {
				k := "sku-" + strconv.Itoa(i%1_200_000)
				mu.Lock()
				if e, ok := idx[k]; ok {
					l.MoveToFront(e)
					e.Value = &item{key: k, value: []byte(k + "v")}
				}
				mu.Unlock()
				if i%2048 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
}

type score struct {
	id    int64
	value float64
	ts    int64
}

func scores() {
	s := make([]score, 6_000_000)
	for i := range s {
		s[i] = score{id: int64(i)}
	}
	for g := range 4 {
		go func() {
			for i := g; ; i += 4 {
				p := &s[i%len(s)]
				p.value += 1.5
				p.ts = int64(i)
				// Each update also formats a small report, as services do.
				_ = strconv.FormatFloat(p.value, 'f', 2, 64)
				if i%4096 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
}

var shipped atomic.Int64

func ship(line string) { shipped.Add(int64(len(line))) }

func logShip() {
	go func() {
		for i := 0; ; i++ {
			line := "level=info msg=request id=" + strconv.Itoa(i)
			go ship(line)
			if i%256 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
}

func childHTTP() string {
	cmd := exec.Command(os.Args[0], "child-http")
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
	log.Fatal("child ended before it was ready")
	return ""
}

func client(tr *http.Transport, addr string, rate int, readBody bool) {
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for range 4 {
		go func() {
			t := time.NewTicker(4 * time.Second / time.Duration(rate))
			for range t.C {
				resp, err := c.Get("http://" + addr + "/")
				if err != nil {
					continue
				}
				if readBody {
					io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}
		}()
	}
}

type record struct {
	id   int
	name string
	refs []*record
}

func limitBatch() {
	// A working set of records, rebuilt piece by piece, each pointing at
	// a fixed base record.
	base := make([]*record, 200_000)
	for i := range base {
		base[i] = &record{id: i, name: strconv.Itoa(i)}
	}
	set := make([]*record, 200_000)
	for g := range 2 {
		go func() {
			for i := g; ; i += 2 {
				r := &record{id: i, name: strconv.Itoa(i), refs: make([]*record, 4)}
				r.refs[0] = base[(i*7)%len(base)]
				set[i%len(set)] = r
			}
		}()
	}
}

func idleConns() {
	ln := listen()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	tr := &http.Transport{MaxIdleConnsPerHost: 4000, MaxIdleConns: 4000}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 3000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get("http://" + ln.Addr().String() + "/")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}
