package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Thresholds of the connection rule, from the exact syscall counts. Go's
// net package makes a fixed set of calls per TCP connection: a dial is
// socket, connect (non-blocking, so EINPROGRESS), one getsockopt
// (SO_ERROR, when the connect completes), setsockopt for TCP_NODELAY and
// keep-alive (5 on Go 1.26), two epoll_ctl and a close; an accept is one
// accept4 and the same setsockopt. getsockopt is counted, connect is not,
// so dials are counted by their getsockopt, checked against setsockopt.
const (
	// New connections per second worth reading.
	connInfoPerSec = 10.0
	// A client making this many connections a second to its servers,
	// each closed after a request or two, leaves 60 s x 50 = 3,000
	// sockets in TIME_WAIT per server, a tenth of the default ephemeral
	// port range (32768-60999) toward one address; each dial also costs
	// a round trip of latency (a TLS handshake more), and about ten
	// syscalls.
	connWarnPerSec = 50.0
	// Writes per new connection at or below this: a few requests per
	// connection (an HTTP/1.1 request is one write; a connection kept
	// alive carries hundreds). A shared client whose idle pool is smaller
	// than its concurrency (http.Transport keeps 2 per host) reuses some:
	// 2 writes per dial at 16 goroutines.
	connRequestsPerConn = 4.0
	// Closes per new connection at least this: the connections are
	// short-lived (closed as fast as they are opened).
	connClosedShare = 0.8
	// setsockopt calls per dial at least this, for getsockopt to count
	// dials (TCP_NODELAY and keep-alive are set on every connection).
	connSetsockoptPerDial = 2.0
)

func init() {
	register(&Rule{ID: "connection-churn", Summary: "a new TCP connection per request: a client that dials per request, or a server whose clients do", Missing: needSyscallsOrStacks, Check: checkConnChurn})
}

// connectSampleShare is the share of stack samples in connect (with
// minSiteSamples of them) from which, without syscall counts, a process is
// said to dial often: as information, since the rate is not known.
const connectSampleShare = 0.05

// writeCalls are the syscalls a request or response is written with.
var writeCalls = []string{"write", "writev", "sendto", "sendmsg"}

// dialCalls are the library calls that open a connection.
var dialCalls = []string{"net.Dial", "net.DialTimeout", "net.(*Dialer).Dial", "net.(*Dialer).DialContext", "net.DialTCP",
	"net/http.(*Client).Do", "net/http.(*Client).Get", "net/http.(*Client).Post", "net/http.Get", "net/http.Post", "net/http.(*Transport).RoundTrip",
	"crypto/tls.Dial", "crypto/tls.DialWithDialer", "crypto/tls.(*Dialer).DialContext"}

func checkConnChurn(w *Window, h *Host) *Finding {
	s := w.Syscalls
	if s == nil {
		return connChurnFromStacks(w)
	}
	dials, _ := s.Rate("getsockopt")
	if set, _ := s.Rate("setsockopt"); set < connSetsockoptPerDial*dials {
		dials = 0 // getsockopt for something other than a dial's SO_ERROR
	}
	// accept4 returns EAGAIN once the backlog is empty, so a loop that
	// accepts one connection per wake-up calls it twice; each connection
	// is registered with the netpoller and removed (two epoll_ctl), which
	// bounds the accepts from above.
	accepts, _ := s.Rate("accept4", "accept")
	if polls, _ := s.Rate("epoll_ctl"); polls > 0 {
		accepts = min(accepts, max(polls/2-dials, accepts/2))
	}
	conns := dials + accepts
	if conns < connInfoPerSec {
		return nil
	}
	closes, _ := s.Rate("close")
	writes, _ := s.Rate(writeCalls...)
	perConn := writes / conns
	if closes < connClosedShare*conns || perConn > connRequestsPerConn {
		return nil // long-lived connections, or many requests on each
	}
	ev := EvidenceList{
		{"dials_per_s", round(dials, 0), "/s"},
		{"accepts_per_s", round(accepts, 0), "/s"},
		{"closes_per_s", round(closes, 0), "/s"},
		{"writes_per_connection", round(perConn, 2), ""},
		{"time_wait_estimate", round(60*conns, 0), "sockets (60 s each)"},
	}
	sources := []Source{SourceSyscalls}
	if st := w.Stacks; st != nil {
		for _, p := range st.KernelPaths {
			if p.Name == "syscall connect" || p.Name == "syscall accept4" || p.Name == "syscall close" || p.Name == "syscall socket" {
				ev = append(ev, Evidence{strings.ReplaceAll(p.Name, " ", "_") + "_pct", pct(p.Share), "% of samples"})
			}
		}
	}
	if dials >= accepts {
		code := dialCode(w)
		sources = codeSources(sources, code)
		sev := Info
		if dials >= connWarnPerSec {
			sev = Warn
		}
		return &Finding{
			Severity: sev,
			Title:    fmt.Sprintf("a new connection per request: %.0f dials a second, %.1f writes on each", dials, perConn),
			Observed: fmt.Sprintf("dials %.0f connections a second and closes them", dials),
			Evidence: ev,
			Cause: fmt.Sprintf("The process opens %.0f TCP connections a second and closes each after about one request (%.1f writes per connection): a client or transport built per request, keep-alive disabled, or idle connections dropped beyond the pool's size (http.Transport keeps 2 per host by default). Each dial costs a round trip before the request (a TLS handshake more), about ten syscalls, and leaves a socket in TIME_WAIT for a minute: about %.0f now, against an ephemeral port range of ~28,000 per destination.",
				dials, perConn, 60*dials),
			Fix:        "Share one http.Client (and its Transport) for the process instead of building one per request; read every response body to the end and close it so the connection goes back to the pool; raise Transport.MaxIdleConnsPerHost to the concurrency toward each host; for raw TCP keep a pool of connections.",
			Sources:    sources,
			Confidence: "high",
			Code:       code,
		}
	}
	return &Finding{
		Severity: Info,
		Title:    fmt.Sprintf("clients open a new connection per request: %.0f accepts a second, %.1f writes on each", accepts, perConn),
		Observed: fmt.Sprintf("accepts %.0f connections a second", accepts),
		Evidence: ev,
		Cause: fmt.Sprintf("The server accepts %.0f connections a second and answers about one request on each (%.1f writes per connection): its clients do not reuse connections (a client built per request, keep-alive off), or it closes them itself (Server.SetKeepAlivesEnabled(false), a Connection: close header). Each costs the server an accept, a goroutine and about ten syscalls, and the clients a round trip.",
			accepts, perConn),
		Fix:        "Find the clients (ss -tn state time-wait toward this port) and make them keep connections alive (one shared http.Client, MaxIdleConnsPerHost at their concurrency); check that the server does not disable keep-alive.",
		Sources:    sources,
		Confidence: "medium",
	}
}

// dialCode names the code that dials: the program's own frames under the
// connect samples; else its call into a dialling library (an HTTP client
// dials on a goroutine of its transport, whose stacks hold no program
// frame, while the program's call to Client.Do waits for it); else where
// the connect samples were taken.
func dialCode(w *Window) []CodeRef {
	all := codeAt(w, "syscall connect", "dials a new connection per request")
	var own []CodeRef
	for _, c := range all {
		if !window.StdlibFunc(c.Func) {
			own = append(own, c)
		}
	}
	if len(own) > 0 {
		return own
	}
	if w.Stacks != nil {
		for _, c := range w.Stacks.LibCalls {
			if slices.Contains(dialCalls, c.Callee) {
				r := callRef(c)
				r.Role = "calls " + c.Callee + ", which dials a new connection per request"
				return []CodeRef{r}
			}
		}
	}
	return all
}

// connChurnFromStacks reports, without syscall counts, a process whose
// stack samples catch it in connect often: the time it spends dialling,
// not the rate.
func connChurnFromStacks(w *Window) *Finding {
	st := w.Stacks
	if st == nil || st.Samples < minSamples {
		return nil
	}
	share := 0.0
	for _, p := range st.KernelPaths {
		if p.Name == "syscall connect" {
			share = p.Share
		}
	}
	if share < connectSampleShare || share*float64(st.Samples) < minSiteSamples {
		return nil
	}
	code := dialCode(w)
	return &Finding{
		Severity:   Info,
		Title:      fmt.Sprintf("%.0f%% of CPU samples are in connect: new connections are opened often", 100*share),
		Observed:   fmt.Sprintf("%.0f%% of its samples in connect", 100*share),
		Evidence:   EvidenceList{{"connect_share_pct", pct(share), "% of samples"}, {"kernel_paths", joinShares(st.KernelPaths, 3), ""}},
		Cause:      "The process spends a noticeable part of its CPU opening TCP connections, which a client reusing its connections hardly does. Without syscall counts the rate, and so whether it is one per request, is not known.",
		Fix:        "Share one http.Client (and its Transport) instead of one per request, read and close every response body, and size Transport.MaxIdleConnsPerHost to the concurrency; for raw TCP keep a pool of connections.",
		Sources:    codeSources([]Source{SourceStacks}, code),
		Confidence: "low",
		Code:       code,
	}
}
