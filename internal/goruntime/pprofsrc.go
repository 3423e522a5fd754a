package goruntime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pprofSource reads a program that serves net/http/pprof, and expvar's
// /debug/vars on the same server when present. It gives the goroutine
// count and dump, threads created, and runtime.MemStats (GC cycles, recent
// pauses, heap objects and goal, allocation totals, GCCPUFraction). Each
// MemStats read stops the program's world briefly (runtime.ReadMemStats).
type pprofSource struct {
	client *http.Client
	base   string // .../debug/pprof/
	vars   string // .../debug/vars, "" when expvar is not served
}

func (s *pprofSource) Kind() string {
	if s.vars != "" {
		return "pprof+expvar"
	}
	return "pprof"
}
func (s *pprofSource) Addr() string { return s.base }
func (s *pprofSource) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// newPprofSource checks that raw is a net/http/pprof endpoint and looks for
// expvar next to it.
func newPprofSource(ctx context.Context, client *http.Client, raw string) (*pprofSource, error) {
	u, err := CheckURL("pprof", raw)
	if err != nil {
		return nil, err
	}
	p := u.Path
	if i := strings.Index(p, "/debug/pprof"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimSuffix(p, "/")
	root := u.Scheme + "://" + u.Host + p
	s := &pprofSource{client: client, base: root + "/debug/pprof/"}
	body, err := httpGetHead(ctx, client, s.base+"goroutine?debug=1", 4096)
	if err != nil {
		return nil, fmt.Errorf("pprof endpoint unreachable or not net/http/pprof: %w", err)
	}
	if _, err := profileTotal(body, "goroutine profile: total "); err != nil {
		return nil, fmt.Errorf("%s is not a net/http/pprof endpoint: %w", s.base, err)
	}
	if b, err := httpGet(ctx, client, root+"/debug/vars", 16<<20); err == nil {
		var v struct {
			MemStats *json.RawMessage `json:"memstats"`
		}
		if json.Unmarshal(b, &v) == nil && v.MemStats != nil {
			s.vars = root + "/debug/vars"
		}
	}
	return s, nil
}

// profileTotal reads N from the first line of a debug=1 profile
// ("goroutine profile: total N").
func profileTotal(b []byte, prefix string) (uint64, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte(prefix))
	if !ok {
		return 0, fmt.Errorf("%w: first line %q lacks %q", ErrMalformed, truncate(string(line), 80), prefix)
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad total in %q", ErrMalformed, truncate(string(line), 80))
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// memStats holds the runtime.MemStats fields gosleuth uses, as expvar
// encodes them.
type memStats struct {
	HeapAlloc, HeapObjects, NextGC uint64
	TotalAlloc, Mallocs            uint64
	NumGC                          uint32
	PauseNs                        []uint64
	GCCPUFraction                  float64
}

func (s *pprofSource) Read(ctx context.Context) (*Sample, error) {
	g, err := httpGetHead(ctx, s.client, s.base+"goroutine?debug=1", 4096)
	if err != nil {
		return nil, fmt.Errorf("read goroutine count: %w", err)
	}
	smp := &Sample{Source: s.Kind()}
	if smp.Goroutines, err = profileTotal(g, "goroutine profile: total "); err != nil {
		return nil, fmt.Errorf("goroutine profile: %w", err)
	}
	smp.Known |= KnownGoroutines
	var ms *memStats
	if s.vars != "" {
		b, err := httpGet(ctx, s.client, s.vars, 16<<20)
		if err != nil {
			return nil, fmt.Errorf("read expvar: %w", err)
		}
		var v struct {
			MemStats *memStats `json:"memstats"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.MemStats == nil {
			return nil, fmt.Errorf("expvar %s: %w: no memstats", s.vars, ErrMalformed)
		}
		ms = v.MemStats
	} else {
		b, err := httpGet(ctx, s.client, s.base+"heap?debug=1", 256<<20)
		if err != nil {
			return nil, fmt.Errorf("read heap profile: %w", err)
		}
		if ms, err = parseHeapMemStats(b); err != nil {
			return nil, err
		}
	}
	smp.Time = time.Now()
	applyMemStats(smp, ms)
	if b, err := httpGet(ctx, s.client, s.base+"threadcreate?debug=1", 16<<20); err == nil {
		if n, err := profileTotal(b, "threadcreate profile: total "); err == nil {
			smp.Threads = n
			smp.Known |= KnownThreads
		}
	}
	return smp, nil
}

func (s *pprofSource) Goroutines(ctx context.Context) (*GoroutineDump, error) {
	body, err := httpGet(ctx, s.client, s.base+"goroutine?debug=2", 256<<20)
	if err != nil {
		return nil, fmt.Errorf("read goroutine dump: %w", err)
	}
	return ParseGoroutines(body)
}

// applyMemStats fills a sample from MemStats.
func applyMemStats(smp *Sample, ms *memStats) {
	smp.GCCycles = uint64(ms.NumGC)
	smp.HeapAlloc, smp.HeapObjects, smp.HeapGoal = ms.HeapAlloc, ms.HeapObjects, ms.NextGC
	smp.AllocBytes, smp.AllocObjects = ms.TotalAlloc, ms.Mallocs
	smp.GCCPUFraction = ms.GCCPUFraction
	smp.Known |= KnownGCCycles | KnownHeapAlloc | KnownHeapObjects | KnownHeapGoal | KnownAllocs | KnownGCCPUFraction
	if len(ms.PauseNs) == 256 {
		// PauseNs is a ring: the pause of GC number n (1-based) is at
		// (n+255)%256. Keep the last min(NumGC, 256).
		n := uint64(ms.NumGC)
		for i := uint64(0); i < min(n, 256); i++ {
			gc := n - i
			smp.Pauses = append(smp.Pauses, Pause{GC: gc, Sec: float64(ms.PauseNs[(gc+255)%256]) / 1e9})
		}
	}
}

// parseHeapMemStats reads the "# Name = value" MemStats lines at the end
// of a heap profile with debug=1.
func parseHeapMemStats(b []byte) (*memStats, error) {
	ms := &memStats{}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "# ")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(line, " = ")
		if !ok {
			continue
		}
		u := func(dst *uint64) {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				*dst = n
				seen++
			}
		}
		switch k {
		case "HeapAlloc":
			u(&ms.HeapAlloc)
		case "HeapObjects":
			u(&ms.HeapObjects)
		case "NextGC":
			u(&ms.NextGC)
		case "TotalAlloc":
			u(&ms.TotalAlloc)
		case "Mallocs":
			u(&ms.Mallocs)
		case "NumGC":
			var n uint64
			u(&n)
			ms.NumGC = uint32(n)
		case "GCCPUFraction":
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				ms.GCCPUFraction = f
			}
		case "PauseNs":
			f := strings.Fields(strings.Trim(v, "[]"))
			ms.PauseNs = make([]uint64, 0, len(f))
			for _, x := range f {
				n, err := strconv.ParseUint(x, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("heap profile MemStats: %w: bad PauseNs", ErrMalformed)
				}
				ms.PauseNs = append(ms.PauseNs, n)
			}
		}
	}
	if seen < 6 {
		return nil, fmt.Errorf("heap profile: %w: no MemStats section", ErrMalformed)
	}
	return ms, nil
}
