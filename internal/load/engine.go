package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/gosleuth/gosleuth/internal/gomem"
)

// closedLoopTicket tells a worker to send back to back until the step ends.
const closedLoopTicket = math.MinInt64

// errShutdown marks a request aborted because the engine is closing; it is
// not recorded.
var errShutdown = errors.New("engine closed")

// Engine owns the connections and workers and runs steps one at a time.
// Connections stay open from one step to the next.
type Engine struct {
	cfg  Config
	base time.Time // the engine clock: nanoseconds since base

	req     []byte // prebuilt HTTP/1.1 request (lean client)
	head    bool
	addr    string
	client  *http.Client // net/http path (TLS, HTTP/2), nil for the lean client
	httpReq *http.Request

	tickets chan int64
	shards  []*shard
	spare   []*sample
	wg      sync.WaitGroup
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc

	closedRun atomic.Bool
	open      atomic.Int64 // connections open now
	maxOpen   atomic.Int64 // most connections open at once, since the last reset
	inFlight  atomic.Int64
	issued    atomic.Int64 // tickets handed to workers in the current step
	sent      atomic.Int64 // requests written, ever (a retry counts once more)

	sleeper *sleeper
	// pacerLag is the pacer's own lateness (µs) in the current step, before
	// any wait for a free connection. Only the pacer writes it.
	pacerLag *hdr.Histogram
	watch    *watcher
	tick     *sample // scratch: the current tick's merged sample
	// clock polls the watched target's GC clock, and fine cuts the
	// latency into short windows to set beside its cycles; both nil
	// without a readable Go target. clockNote says why there is no clock.
	clock     *gcClock
	fine      *fineSeries
	clockNote string

	ticks []Tick
	hlog  []hlogLine
	steps int
}

// NewEngine checks cfg and starts the workers. Close stops them.
func NewEngine(cfg Config) (*Engine, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: c, base: time.Now(), tickets: make(chan int64), tick: newSample(), pacerLag: newHist()}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if err := e.setupTransport(); err != nil {
		return nil, err
	}
	sl, err := newSleeper()
	if err != nil {
		return nil, err
	}
	e.sleeper = sl
	if c.Watch > 0 {
		w, err := newWatcher(c.ProcRoot, c.Watch, c.GC, c.Tick)
		if err != nil {
			sl.close()
			return nil, err
		}
		e.watch = w
		if c.GCPoll > 0 {
			if ck, err := openGCClock(c.ProcRoot, c.Watch, c.GCPoll, e.now); err == nil {
				e.clock = ck
			} else if !errors.Is(err, gomem.ErrNotGo) {
				e.clockNote = "P99 spikes are not set beside GC cycles: no GC clock: " + err.Error()
			}
		}
	}
	nsh := min(c.Connections, 4*runtime.GOMAXPROCS(0))
	for range nsh {
		e.shards = append(e.shards, &shard{cur: newSample(), fine: e.clock != nil})
		e.spare = append(e.spare, newSample())
	}
	for i := range c.Connections {
		w := &worker{e: e, sh: e.shards[i%nsh]}
		e.wg.Add(1)
		go w.run()
	}
	return e, nil
}

func (e *Engine) setupTransport() error {
	c := &e.cfg
	host := c.URL.Hostname()
	port := c.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[c.URL.Scheme]
	}
	e.addr = net.JoinHostPort(host, port)
	e.head = c.Method == "HEAD"
	if c.URL.Scheme == "http" && c.Proto != ProtoHTTP2 {
		e.req = buildRequest(c)
		return nil
	}
	var p http.Protocols
	switch {
	case c.URL.Scheme == "http": // h2c with prior knowledge
		p.SetUnencryptedHTTP2(true)
	case c.Proto == ProtoHTTP2:
		p.SetHTTP2(true)
	case c.Proto == ProtoHTTP1:
		p.SetHTTP1(true)
	default:
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	}
	d := &net.Dialer{Timeout: c.Timeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			e.opened()
			return &countedConn{Conn: conn, e: e}, nil
		},
		// The cap: net/http never opens more than this many connections
		// to the host, whatever the backlog.
		MaxConnsPerHost:     c.Connections,
		MaxIdleConnsPerHost: c.Connections,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: c.Insecure},
		Protocols:           &p,
		DisableCompression:  true,
	}
	e.client = &http.Client{Transport: tr, Timeout: c.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(c.Method, c.URL.String(), nil)
	if err != nil {
		return fmt.Errorf("%w: build request: %v", ErrBadInput, err)
	}
	for _, h := range c.Headers {
		if equalFold(h.Name, "host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "gosleuth-load")
	}
	e.httpReq = req
	return nil
}

// now is the engine clock in nanoseconds (monotonic).
func (e *Engine) now() int64 { return int64(time.Since(e.base)) }

func (e *Engine) opened() {
	n := e.open.Add(1)
	for {
		m := e.maxOpen.Load()
		if n <= m || e.maxOpen.CompareAndSwap(m, n) {
			return
		}
	}
}

// Close stops the workers, closes every connection and waits for them.
func (e *Engine) Close() {
	e.closedRun.Store(false)
	e.cancel()
	close(e.tickets)
	e.wg.Wait()
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	e.sleeper.close()
	if e.clock != nil {
		e.clock.close()
	}
	if e.watch != nil {
		e.watch.close()
	}
}

// countedConn keeps the open-connection count for net/http's connections.
type countedConn struct {
	net.Conn
	e    *Engine
	once sync.Once
}

// Close closes the connection and counts it closed once.
func (c *countedConn) Close() error {
	c.once.Do(func() { c.e.open.Add(-1) })
	return c.Conn.Close()
}

// worker sends requests on one connection (or, for net/http, one slot of
// the shared client).
type worker struct {
	e    *Engine
	sh   *shard
	conn *h1conn
	body bytes.Reader
}

func (w *worker) run() {
	e := w.e
	defer e.wg.Done()
	defer w.closeConn()
	for {
		ready := e.now()
		t, ok := <-e.tickets
		if !ok {
			return
		}
		if t == closedLoopTicket {
			for e.closedRun.Load() {
				now := e.now()
				if err := w.one(now, now); err != nil {
					// Do not spin on a refused connection.
					select {
					case <-time.After(10 * time.Millisecond):
					case <-e.ctx.Done():
					}
				}
			}
			continue
		}
		w.one(t, ready)
	}
}

// one sends one request and records it; it returns the transport error.
func (w *worker) one(intended, ready int64) error {
	e := w.e
	e.inFlight.Add(1)
	var status int
	var sent int64
	var err error
	if e.client != nil {
		status, sent, err = w.doHTTP()
	} else {
		status, sent, err = w.doH1()
	}
	done := e.now()
	e.inFlight.Add(-1)
	if e.ctx.Err() != nil {
		return errShutdown // aborted by Close: not the server's doing
	}
	w.sh.record(intended, ready, sent, done, status, err)
	return err
}

func (w *worker) closeConn() {
	if w.conn != nil {
		w.conn.stop()
		w.conn.c.Close()
		w.conn = nil
		w.e.open.Add(-1)
	}
}

func (w *worker) dial() error {
	e := w.e
	d := net.Dialer{Timeout: e.cfg.Timeout}
	c, err := d.DialContext(e.ctx, "tcp", e.addr)
	if err != nil {
		return err
	}
	e.opened()
	w.conn = &h1conn{c: c, br: bufio.NewReaderSize(c, 16<<10)}
	// Close interrupts a blocked read by moving the deadline to the past.
	w.conn.stop = context.AfterFunc(e.ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return nil
}

// doH1 runs one request on the worker's own keep-alive connection, dialling
// it when needed. A request that fails on a reused connection before any
// byte of the reply arrived (the server closed an idle connection) is sent
// once more on a fresh one, as net/http does; its intended time is kept, so
// the retry shows in the corrected latency.
func (w *worker) doH1() (status int, sent int64, err error) {
	e := w.e
	for attempt := 0; ; attempt++ {
		if w.conn == nil {
			if err := w.dial(); err != nil {
				return 0, e.now(), err
			}
		}
		h := w.conn
		// Re-arm the deadline only when a tenth of the timeout has passed:
		// each request gets between 0.9 and 1 times the timeout, without a
		// timer update per request.
		now := time.Now()
		if h.deadline.Sub(now) < e.cfg.Timeout*9/10 {
			h.deadline = now.Add(e.cfg.Timeout)
			h.c.SetDeadline(h.deadline)
		}
		sent = e.now()
		e.sent.Add(1)
		r, err := h.roundTrip(e.req, e.head)
		if err != nil {
			reused := h.used
			w.closeConn()
			if reused && attempt == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
				errors.Is(err, syscall.EPIPE)) && e.ctx.Err() == nil {
				continue
			}
			return 0, sent, err
		}
		h.used = true
		if r.close {
			w.closeConn()
		}
		return r.status, sent, nil
	}
}

// doHTTP runs one request through net/http.
func (w *worker) doHTTP() (status int, sent int64, err error) {
	e := w.e
	req := e.httpReq.Clone(e.ctx)
	if len(e.cfg.Body) > 0 {
		w.body.Reset(e.cfg.Body)
		req.Body = io.NopCloser(&w.body)
		req.ContentLength = int64(len(e.cfg.Body))
	}
	sent = e.now()
	e.sent.Add(1)
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, sent, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, sent, err
}
