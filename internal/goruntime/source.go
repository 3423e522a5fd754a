package goruntime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Source is a way into a running Go program's runtime: its agent socket, a
// net/http/pprof endpoint (with expvar when served), or a Prometheus
// client_golang /metrics page. Sources are safe for use by one goroutine at
// a time.
type Source interface {
	// Kind is "agent", "pprof", "expvar" or "prometheus".
	Kind() string
	// Addr is where the source is read (socket path or URL).
	Addr() string
	// Read takes a point-in-time sample. Fields the source cannot give have
	// their Known bit clear.
	Read(ctx context.Context) (*Sample, error)
	// Goroutines returns the goroutine dump grouped by identical stacks, or
	// an error wrapping ErrUnsupported when the source has none.
	Goroutines(ctx context.Context) (*GoroutineDump, error)
	// Close releases the source's connections.
	Close() error
}

// FlightRecorder is implemented by sources that can return an execution
// trace of the last seconds (the agent, when the program enabled
// agent.Options.FlightRecorder; otherwise FlightRecording fails with the
// agent's explanation). The bytes are for go tool trace.
type FlightRecorder interface {
	FlightRecording(ctx context.Context) ([]byte, error)
}

// Errors of sources.
var (
	// ErrNoSource: no runtime source was found for the process.
	ErrNoSource = errors.New("no runtime source")
	// ErrUnsupported: the source cannot give what was asked.
	ErrUnsupported = errors.New("not supported by this source")
	// ErrMalformed: the source answered with data that does not parse.
	ErrMalformed = errors.New("malformed runtime data")
)

// Options say where to look for a runtime source.
type Options struct {
	// ProcRoot is the procfs mount, /proc when empty.
	ProcRoot string
	// PprofURL is a net/http/pprof endpoint ("http://127.0.0.1:6060" or
	// ".../debug/pprof/"); its /debug/vars is tried for expvar memstats.
	PprofURL string
	// MetricsURL is a Prometheus /metrics page with client_golang's go_*
	// metrics.
	MetricsURL string
	// AgentDirs are extra directories to search for the agent's socket
	// (agent.Options.Dir), before the default ones.
	AgentDirs []string
	// Facts, when set, are the process's discovered facts (saves reading
	// them again).
	Facts *Facts
	// HTTPClient is used for URLs; a client with a 10 s timeout when nil.
	HTTPClient *http.Client
	// NoMemory leaves out the memory source: without an agent or a URL,
	// Connect then fails with ErrNoSource.
	NoMemory bool
}

// Connect finds a runtime source for process pid: an explicit URL when
// given (MetricsURL, then PprofURL), otherwise the process's agent socket,
// otherwise its memory (package gomem; needs ptrace access to it).
// The notes say what was tried and ignored (a stale socket, one owned by
// another process). With nothing found it returns an error wrapping
// ErrNoSource.
func Connect(ctx context.Context, pid int, opts Options) (Source, []string, error) {
	var notes []string
	client := opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.MetricsURL != "" {
		s, err := newPromSource(ctx, client, opts.MetricsURL)
		if err != nil {
			return nil, notes, err
		}
		return s, notes, nil
	}
	if opts.PprofURL != "" {
		s, err := newPprofSource(ctx, client, opts.PprofURL)
		if err != nil {
			return nil, notes, err
		}
		return s, notes, nil
	}
	facts := opts.Facts
	if facts == nil {
		f, err := discoverIdentity(opts.ProcRoot, pid)
		if err != nil {
			return nil, notes, err
		}
		facts = f
	}
	s, agentNotes, err := findAgent(ctx, opts.ProcRoot, facts, opts.AgentDirs)
	notes = append(notes, agentNotes...)
	if err != nil {
		return nil, notes, err
	}
	if s != nil {
		return s, notes, nil
	}
	if opts.NoMemory {
		return nil, notes, fmt.Errorf("process %d: %w (no agent socket found)", pid, ErrNoSource)
	}
	// No agent: read the runtime from the process's memory.
	ms, err := newMemSource(proc.NewFS(opts.ProcRoot), pid)
	if err != nil {
		return nil, notes, fmt.Errorf("process %d: %w (no agent socket found; memory: %v)", pid, ErrNoSource, err)
	}
	return ms, notes, nil
}

// CheckURL parses the URL of a runtime endpoint given on the command line
// (kind "pprof" or "metrics"): it must be http or https with a host. Commands
// call it before any work so a typo is a usage error, not a note at the end.
func CheckURL(kind, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		want := "http://HOST:PORT/metrics"
		if kind == "pprof" {
			want = "http://HOST:PORT[/debug/pprof/]"
		}
		return nil, fmt.Errorf("%s URL %q: want %s", kind, raw, want)
	}
	return u, nil
}

// httpGet fetches url and returns the body (at most limit bytes), failing
// on a non-200 status.
func httpGet(ctx context.Context, client *http.Client, url string, limit int64) ([]byte, error) {
	body, err := getBody(ctx, client, url, limit+1)
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("get %s: reply larger than %d bytes", url, limit)
	}
	return body, nil
}

// getBody GETs url and returns at most n bytes of its body; a status other
// than 200 is an error quoting the start of the body.
func getBody(ctx context.Context, client *http.Client, url string, n int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, n))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	return body, nil
}

// httpStream GETs url and hands its body to parse, failing on a non-200
// status and when the body is longer than limit bytes: the body is never
// held whole, so its size costs only what parse keeps.
func httpStream(ctx context.Context, client *http.Client, url string, limit int64, parse func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request for %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("get %s: %s: %s", url, resp.Status, strings.TrimSpace(string(head)))
	}
	lr := &io.LimitedReader{R: resp.Body, N: limit + 1}
	if err := parse(lr); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("get %s: reply larger than %d bytes", url, limit)
		}
		return err
	}
	if lr.N <= 0 {
		return fmt.Errorf("get %s: reply larger than %d bytes", url, limit)
	}
	return nil
}

// httpGetHead returns at most the first n bytes of url's reply, for replies
// of which only the first line is read (a debug=1 goroutine profile's
// "goroutine profile: total N"): a huge or endless reply then costs n
// bytes, not the 256 MiB cap (600 MB of RSS to reject before).
func httpGetHead(ctx context.Context, client *http.Client, url string, n int64) ([]byte, error) {
	return getBody(ctx, client, url, n)
}

// parseAgentMetrics decodes the agent's metrics text (see package wire).
func parseAgentMetrics(b []byte) (pid int, t time.Time, goVersion string, m map[string]Metric, err error) {
	var d metricsDecoder
	return d.decode(b)
}

// metricsDecoder decodes agent replies, keeping each histogram's bucket
// boundaries: they never change within a process, and parsing them again
// (about 1,100 floats in Go 1.26) was most of a decode.
type metricsDecoder struct {
	buckets map[string]decodedBuckets
}

type decodedBuckets struct {
	text string
	vals []float64
}

// histogram parses the rest of an "h NAME " line: "N b0 .. bN-1 c0 .. cN-2".
func (d *metricsDecoder) histogram(name, rest string) (*Histogram, string) {
	ns, rest, _ := strings.Cut(rest, " ")
	nb, err := strconv.Atoi(ns)
	if err != nil || nb < 1 || nb > 1<<16 {
		return nil, "bad histogram size"
	}
	// The bucket text is the next nb fields.
	end := 0
	for i := 0; i < nb; i++ {
		j := strings.IndexByte(rest[end:], ' ')
		if j < 0 {
			if i == nb-1 && nb == 1 {
				end = len(rest)
				break
			}
			return nil, "histogram sizes do not match"
		}
		end += j + 1
	}
	btext := rest[:max(end-1, 0)]
	counts := rest[min(end, len(rest)):]
	h := &Histogram{Counts: make([]uint64, 0, nb-1)}
	if c, ok := d.buckets[name]; ok && c.text == btext {
		h.Buckets = c.vals
	} else {
		h.Buckets = make([]float64, 0, nb)
		for f := range strings.SplitSeq(btext, " ") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || (len(h.Buckets) > 0 && !(v > h.Buckets[len(h.Buckets)-1])) {
				return nil, "bad histogram bucket"
			}
			h.Buckets = append(h.Buckets, v)
		}
		if d.buckets == nil {
			d.buckets = make(map[string]decodedBuckets)
		}
		d.buckets[name] = decodedBuckets{btext, h.Buckets}
	}
	if nb > 1 {
		for f := range strings.SplitSeq(counts, " ") {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return nil, "bad histogram count"
			}
			h.Counts = append(h.Counts, v)
		}
	} else if counts != "" {
		return nil, "histogram sizes do not match"
	}
	if len(h.Counts) != nb-1 || len(h.Buckets) != nb {
		return nil, "histogram sizes do not match"
	}
	return h, ""
}

// decode decodes one reply.
func (d *metricsDecoder) decode(b []byte) (pid int, t time.Time, goVersion string, m map[string]Metric, err error) {
	m = make(map[string]Metric, 128)
	bad := func(line int, why string) error {
		return fmt.Errorf("agent metrics line %d: %w: %s", line, ErrMalformed, why)
	}
	n := 0
	for raw := range bytes.Lines(b) {
		n++
		line := string(bytes.TrimSuffix(raw, []byte("\n")))
		if n == 1 {
			if line != "gosleuth-metrics 1" {
				return 0, t, "", nil, bad(n, "not a gosleuth agent metrics reply")
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "h "); ok {
			name, rest, _ := strings.Cut(rest, " ")
			h, why := d.histogram(name, rest)
			if h == nil {
				return 0, t, "", nil, bad(n, why)
			}
			m[name] = Metric{Kind: 'h', Hist: h}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			if len(f) == 0 {
				continue
			}
			return 0, t, "", nil, bad(n, "too few fields")
		}
		switch f[0] {
		case "pid":
			if pid, err = strconv.Atoi(f[1]); err != nil {
				return 0, t, "", nil, bad(n, "bad pid")
			}
		case "time":
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, t, "", nil, bad(n, "bad time")
			}
			t = time.Unix(0, ns)
		case "go":
			goVersion = f[1]
		case "u":
			if len(f) != 3 {
				return 0, t, "", nil, bad(n, "want 3 fields")
			}
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return 0, t, "", nil, bad(n, "bad uint64")
			}
			m[f[1]] = Metric{Kind: 'u', Uint: v}
		case "f":
			if len(f) != 3 {
				return 0, t, "", nil, bad(n, "want 3 fields")
			}
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return 0, t, "", nil, bad(n, "bad float64")
			}
			m[f[1]] = Metric{Kind: 'f', Float: v}
		case "x":
			m[f[1]] = Metric{Kind: 'x'}
		default:
			return 0, t, "", nil, bad(n, "unknown item "+strconv.Quote(f[0]))
		}
	}
	if n == 0 {
		return 0, t, "", nil, fmt.Errorf("agent metrics: %w: empty reply", ErrMalformed)
	}
	if t.IsZero() {
		return 0, t, "", nil, bad(n, "no time")
	}
	return pid, t, goVersion, m, nil
}
