package load

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
)

// ErrBadInput marks a configuration the generator refuses to run; callers
// test for it with errors.Is and report a usage error.
var ErrBadInput = errors.New("bad input")

// MaxDuration bounds every run, ramp and search.
const MaxDuration = time.Hour

// MaxRate bounds the requested rate (requests per second).
const MaxRate = 10_000_000

// MaxConnections bounds Config.Connections.
const MaxConnections = 10_000

// Proto selects the HTTP version.
type Proto string

// The protocols the generator speaks.
const (
	// ProtoAuto is HTTP/1.1 for http:// URLs (the lean client) and whatever
	// TLS negotiates (HTTP/2 or HTTP/1.1) for https:// URLs.
	ProtoAuto Proto = "auto"
	// ProtoHTTP1 forces HTTP/1.1.
	ProtoHTTP1 Proto = "http1"
	// ProtoHTTP2 forces HTTP/2: h2c (prior knowledge) for http:// URLs, TLS
	// with ALPN h2 for https:// URLs.
	ProtoHTTP2 Proto = "h2"
)

// Header is one request header line.
type Header struct{ Name, Value string }

// Config is what every step of a run shares.
type Config struct {
	// URL is the target, http:// or https://.
	URL *url.URL
	// Method is the request method (GET when empty).
	Method string
	// Headers are sent with every request, in order.
	Headers []Header
	// Body is sent with every request (with a Content-Length).
	Body []byte
	// Connections is the fixed number of connections and workers; it is
	// never exceeded.
	Connections int
	// Timeout bounds each request, from its actual send (default 10s).
	Timeout time.Duration
	// Proto selects the HTTP version (default ProtoAuto).
	Proto Proto
	// Insecure skips TLS certificate verification.
	Insecure bool
	// Tick is the interval of the time series and of the self-checks
	// (default 1s). Step durations are rounded up to whole ticks.
	Tick time.Duration
	// Warmup is dropped from the start of every step's histograms (default:
	// one tick, or 10% of the step when that is longer, at most 5s).
	Warmup time.Duration
	// MaxLag is the highest generator lag p99 of a valid step (default
	// 1ms).
	MaxLag time.Duration
	// Watch, when non-zero, is the PID whose CPU, RSS, threads and context
	// switches are sampled every tick.
	Watch int
	// ProcRoot is the procfs mount the watched process is read through
	// ("" is /proc).
	ProcRoot string
	// GC, when set, is the watched process's runtime source (its agent, a
	// pprof or a /metrics endpoint, see goruntime.Connect), read once per
	// tick for GC cycles and pauses. The engine does not close it.
	GC goruntime.Source
	// GCPoll is the period at which the watched process's GC clock is read
	// from its memory (package gomem: no agent, no stop, reads only), to
	// set the latency's P99 spikes beside its GC cycles (0:
	// DefaultGCPoll; negative: off). It needs a Go target whose memory
	// gosleuth may read.
	GCPoll time.Duration
	// OnTick, when set, is called after every tick (for a live line).
	OnTick func(Tick)
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Method == "" {
		d.Method = "GET"
	}
	if d.Connections == 0 {
		d.Connections = 50
	}
	if d.Timeout == 0 {
		d.Timeout = 10 * time.Second
	}
	if d.Proto == "" {
		d.Proto = ProtoAuto
	}
	if d.Tick == 0 {
		d.Tick = time.Second
	}
	if d.MaxLag == 0 {
		d.MaxLag = time.Millisecond
	}
	if d.GCPoll == 0 {
		d.GCPoll = DefaultGCPoll
	}
	return d
}

func (c *Config) validate() error {
	if c.URL == nil {
		return fmt.Errorf("%w: no URL", ErrBadInput)
	}
	if _, err := ParseURL(c.URL.String()); err != nil {
		return err
	}
	if c.Connections < 1 || c.Connections > MaxConnections {
		return fmt.Errorf("%w: connections must be 1..%d, got %d", ErrBadInput, MaxConnections, c.Connections)
	}
	if c.Timeout < time.Millisecond {
		return fmt.Errorf("%w: timeout must be at least 1ms, got %s", ErrBadInput, c.Timeout)
	}
	switch c.Proto {
	case ProtoAuto, ProtoHTTP1, ProtoHTTP2:
	default:
		return fmt.Errorf("%w: protocol must be auto, http1 or h2, got %q", ErrBadInput, c.Proto)
	}
	if c.Tick < 10*time.Millisecond {
		return fmt.Errorf("%w: tick must be at least 10ms", ErrBadInput)
	}
	for _, h := range c.Headers {
		if h.Name == "" || strings.ContainsAny(h.Name+h.Value, "\r\n") || strings.ContainsAny(h.Name, " :") {
			return fmt.Errorf("%w: malformed header %q", ErrBadInput, h.Name+": "+h.Value)
		}
	}
	if strings.ContainsAny(c.Method, " \r\n") {
		return fmt.Errorf("%w: malformed method %q", ErrBadInput, c.Method)
	}
	return nil
}

// ParseURL checks that s is an absolute http or https URL with a host.
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: parse URL %q: %v", ErrBadInput, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: URL %q: scheme must be http or https", ErrBadInput, s)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%w: URL %q has no host", ErrBadInput, s)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: URL %q: bad port %q", ErrBadInput, s, p)
		}
	}
	return u, nil
}

// ParseHeader parses "Name: value".
func ParseHeader(s string) (Header, error) {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") || strings.ContainsAny(value, "\r\n") {
		return Header{}, fmt.Errorf("%w: header %q: want \"Name: value\"", ErrBadInput, s)
	}
	return Header{name, strings.TrimSpace(value)}, nil
}

// ParseRate parses a rate in requests per second: "5000", "5k", "2.5k",
// "1m" (million), or "max" for a closed loop (returned as 0).
func ParseRate(s string) (float64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "/s")
	if t == "max" {
		return 0, nil
	}
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1e3, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1e6, t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: rate %q: want requests per second such as 5000 or 5k, or max", ErrBadInput, s)
	}
	v *= mult
	if v <= 0 {
		return 0, fmt.Errorf("%w: rate %q must be above 0 (or max for a closed loop)", ErrBadInput, s)
	}
	if v > MaxRate {
		return 0, fmt.Errorf("%w: rate %q is above the limit of %d/s", ErrBadInput, s, MaxRate)
	}
	return v, nil
}

// StepSpec is a ramp: add Inc requests per second every Every.
type StepSpec struct {
	Inc   float64
	Every time.Duration
}

// ParseStep parses "+1000/30s" (the plus sign is optional; "+1k/30s" works).
func ParseStep(s string) (StepSpec, error) {
	inc, every, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return StepSpec{}, fmt.Errorf("%w: step %q: want +RATE/DURATION such as +1000/30s", ErrBadInput, s)
	}
	r, err := ParseRate(strings.TrimPrefix(inc, "+"))
	if err != nil || r == 0 {
		return StepSpec{}, fmt.Errorf("%w: step %q: bad increment %q", ErrBadInput, s, inc)
	}
	d, err := time.ParseDuration(every)
	if err != nil || d < 100*time.Millisecond {
		return StepSpec{}, fmt.Errorf("%w: step %q: bad step duration %q (at least 100ms)", ErrBadInput, s, every)
	}
	return StepSpec{Inc: r, Every: d}, nil
}

// SLA is a latency objective on the corrected latency: Quantile (in
// percent, e.g. 99 or 99.9) at most Limit.
type SLA struct {
	Quantile float64
	Limit    time.Duration
	// Text is the SLA as given.
	Text string
}

// ParseSLA parses "p99<=15ms", "p99.9<50ms" or "p50<=2ms".
func ParseSLA(s string) (SLA, error) {
	t := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), " ", "")
	bad := fmt.Errorf("%w: SLA %q: want pNN<=DURATION such as p99<=15ms", ErrBadInput, s)
	if !strings.HasPrefix(t, "p") {
		return SLA{}, bad
	}
	q, lim, ok := strings.Cut(t[1:], "<=")
	if !ok {
		q, lim, ok = strings.Cut(t[1:], "<")
	}
	if !ok {
		return SLA{}, bad
	}
	qv, err := strconv.ParseFloat(q, 64)
	if err != nil || !(qv > 0 && qv < 100) {
		return SLA{}, bad
	}
	d, err := time.ParseDuration(lim)
	if err != nil || d <= 0 {
		return SLA{}, bad
	}
	return SLA{Quantile: qv, Limit: d, Text: s}, nil
}

// Met reports whether a step meets the SLA and the value it was judged on.
func (s SLA) Met(r *StepResult) (bool, float64) {
	if r.hist == nil || r.hist.TotalCount() == 0 {
		return false, 0
	}
	v := float64(r.hist.ValueAtQuantile(s.Quantile)) / 1e3
	return v <= float64(s.Limit)/1e6, v
}
