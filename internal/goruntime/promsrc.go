package goruntime

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"time"
)

// promSource reads the go_* metrics of a Prometheus client_golang /metrics
// page. Every client_golang version gives goroutines, threads created, GC
// cycles and pause quantiles, heap objects and goal; a program registering
// the Go collector with runtime/metrics rules (client_golang ≥ 1.12) gives
// more, under names derived from runtime/metrics, and those are used when
// present.
type promSource struct {
	client *http.Client
	url    string
}

func (s *promSource) Kind() string { return "prometheus" }
func (s *promSource) Addr() string { return s.url }
func (s *promSource) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

func (s *promSource) Goroutines(context.Context) (*GoroutineDump, error) {
	return nil, fmt.Errorf("goroutine dump from a /metrics page: %w (pass --pprof-url or import the agent)", ErrUnsupported)
}

func newPromSource(ctx context.Context, client *http.Client, raw string) (*promSource, error) {
	if _, err := CheckURL("metrics", raw); err != nil {
		return nil, err
	}
	s := &promSource{client: client, url: raw}
	if _, err := s.Read(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// promSeries is one parsed exposition line.
type promSeries struct {
	labels map[string]string
	value  float64
}

// parseProm parses the Prometheus text exposition format into series by
// metric name. Comments are skipped; a malformed line is an error.
func parseProm(b []byte) (map[string][]promSeries, error) {
	return parsePromReader(bytes.NewReader(b), "")
}

// maxPromSeries bounds the series parsePromReader keeps. client_golang's Go
// collector writes a few hundred go_* series (about 2,000 with every
// runtime/metrics histogram bucket); a page with far more is not one, and
// keeping them all cost 220 MB on a page repeating one go_* line.
const maxPromSeries = 20000

// parsePromReader parses the exposition format from r, keeping only the
// series whose name starts with prefix: the lines of other metrics are
// skipped unparsed, so a page of any size costs memory only for the kept
// series (a 64 MiB page of application metrics cost 171 MB of RSS when
// it was read whole and every series kept).
func parsePromReader(r io.Reader, prefix string) (map[string][]promSeries, error) {
	out := map[string][]promSeries{}
	kept := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 || raw[0] == '#' || !bytes.HasPrefix(raw, []byte(prefix)) {
			continue
		}
		line := string(raw)
		name, rest := line, ""
		labels := map[string]string(nil)
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("metrics line %d: %w: unclosed labels", n, ErrMalformed)
			}
			var err error
			if labels, err = parseLabels(rest[1:end]); err != nil {
				return nil, fmt.Errorf("metrics line %d: %w", n, err)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if name == "" || len(f) < 1 || len(f) > 2 {
			return nil, fmt.Errorf("metrics line %d: %w: want NAME[{LABELS}] VALUE [TIMESTAMP]", n, ErrMalformed)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w: bad value %q", n, ErrMalformed, f[0])
		}
		if kept++; kept > maxPromSeries {
			return nil, fmt.Errorf("metrics line %d: %w: more than %d series named %s*", n, ErrMalformed, maxPromSeries, prefix)
		}
		out[name] = append(out[name], promSeries{labels, v})
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("metrics line %d: %w: %w", n+1, ErrMalformed, err)
	} else if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// parseLabels parses `a="x",b="y\"z"`.
func parseLabels(s string) (map[string]string, error) {
	m := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, fmt.Errorf("%w: bad label in {%s}", ErrMalformed, s)
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("%w: unterminated label value", ErrMalformed)
		}
		m[key] = val.String()
		s = strings.TrimLeft(strings.TrimSpace(s[i+1:]), ",")
		s = strings.TrimSpace(s)
	}
	return m, nil
}

// PromName returns the name client_golang's Go collector gives a
// runtime/metrics metric: go_ + path with / and - turned into _ + unit,
// plus _total for cumulative scalars.
func PromName(d metrics.Description) string {
	key, unit, _ := strings.Cut(d.Name, ":")
	key = strings.TrimPrefix(key, "/")
	sub, name := path.Dir(key), path.Base(key)
	r := strings.NewReplacer("/", "_", "-", "_", "*", "_")
	n := "go_" + r.Replace(sub) + "_" + r.Replace(name) + "_" + r.Replace(unit)
	if d.Cumulative && d.Kind != metrics.KindFloat64Histogram {
		n += "_total"
	}
	return n
}

func (s *promSource) Read(ctx context.Context) (*Sample, error) {
	var series map[string][]promSeries
	err := httpStream(ctx, s.client, s.url, 64<<20, func(r io.Reader) error {
		var err error
		series, err = parsePromReader(r, "go_")
		return err
	})
	if errors.Is(err, ErrMalformed) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint unreachable: %w", err)
	}
	t := time.Now()
	if series["go_goroutines"] == nil && series["go_info"] == nil {
		return nil, fmt.Errorf("%s has no go_goroutines or go_info: %w (not a Go client_golang page?)", s.url, ErrMalformed)
	}
	smp := &Sample{Time: t, Source: "prometheus"}
	// Runtime/metrics-derived series first.
	m := map[string]Metric{}
	for _, d := range metrics.All() {
		pn := PromName(d)
		switch d.Kind {
		case metrics.KindUint64:
			if v, ok := promScalar(series, pn); ok {
				m[d.Name] = Metric{Kind: 'u', Uint: uint64(v)}
			}
		case metrics.KindFloat64:
			if v, ok := promScalar(series, pn); ok {
				m[d.Name] = Metric{Kind: 'f', Float: v}
			}
		case metrics.KindFloat64Histogram:
			if h := promHistogram(series[pn+"_bucket"]); h != nil {
				m[d.Name] = Metric{Kind: 'h', Hist: h}
			}
		}
	}
	if len(m) > 0 {
		sampleFromMetrics(smp, m)
		smp.Raw = nil
	}
	// The classic go_* set.
	set := func(name string, dst *uint64, bit Known) {
		if smp.Known.Has(bit) {
			return
		}
		if v, ok := promScalar(series, name); ok {
			*dst = uint64(v)
			smp.Known |= bit
		}
	}
	set("go_goroutines", &smp.Goroutines, KnownGoroutines)
	set("go_threads", &smp.Threads, KnownThreads)
	set("go_gc_duration_seconds_count", &smp.GCCycles, KnownGCCycles)
	set("go_memstats_heap_objects", &smp.HeapObjects, KnownHeapObjects)
	set("go_memstats_next_gc_bytes", &smp.HeapGoal, KnownHeapGoal)
	set("go_memstats_heap_alloc_bytes", &smp.HeapAlloc, KnownHeapAlloc)
	set("go_sched_gomaxprocs_threads", &smp.GOMAXPROCS, KnownGOMAXPROCS)
	if !smp.Known.Has(KnownAllocs) {
		a, ok1 := promScalar(series, "go_memstats_alloc_bytes_total")
		o, ok2 := promScalar(series, "go_memstats_mallocs_total")
		if ok1 && ok2 {
			smp.AllocBytes, smp.AllocObjects = uint64(a), uint64(o)
			smp.Known |= KnownAllocs
		}
	}
	if v, ok := promScalar(series, "go_memstats_gc_cpu_fraction"); ok {
		smp.GCCPUFraction = v
		smp.Known |= KnownGCCPUFraction
	}
	for _, q := range series["go_gc_duration_seconds"] {
		if qs, ok := q.labels["quantile"]; ok {
			if qv, err := strconv.ParseFloat(qs, 64); err == nil && !math.IsNaN(q.value) {
				smp.RecentPauses = append(smp.RecentPauses, Quantile{qv, q.value})
			}
		}
	}
	if len(smp.RecentPauses) > 0 {
		sort.Slice(smp.RecentPauses, func(i, j int) bool { return smp.RecentPauses[i].Q < smp.RecentPauses[j].Q })
		smp.Known |= KnownRecentPauses
	}
	for _, in := range series["go_info"] {
		if v := in.labels["version"]; v != "" {
			smp.GoVersion = v
		}
	}
	return smp, nil
}

// promScalar returns the value of an unlabelled series (or the first).
func promScalar(series map[string][]promSeries, name string) (float64, bool) {
	ss := series[name]
	if len(ss) == 0 {
		return 0, false
	}
	return ss[0].value, true
}

// promHistogram turns cumulative _bucket series into a Histogram.
func promHistogram(ss []promSeries) *Histogram {
	type b struct {
		le  float64
		cum float64
	}
	var bs []b
	for _, s := range ss {
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			return nil
		}
		bs = append(bs, b{le, s.value})
	}
	if len(bs) == 0 {
		return nil
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	h := &Histogram{Buckets: []float64{math.Inf(-1)}}
	prev := 0.0
	for _, x := range bs {
		h.Buckets = append(h.Buckets, x.le)
		h.Counts = append(h.Counts, uint64(max(x.cum-prev, 0)))
		prev = x.cum
	}
	return h
}
