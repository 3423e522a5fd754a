package export

import (
	"context"
	"runtime/metrics"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gosleuth/gosleuth/internal/goruntime"
)

// Go runtime metrics of processes that have a runtime source (gosleuth's
// agent, or the process's memory for any Go process gosleuth may read):
// the scalar runtime/metrics values (those the memory source reads, under
// the same names), named as client_golang's Go
// collector names them (go_gc_cycles_total_gc_cycles_total...) under the
// prefix gosleuth_, summed per group. Cumulative ones are counters of what
// was added while gosleuth watched (a process's first reading is its
// baseline), so they stay monotonic when processes exit or restart.

// connectRetry is how long a Go process without a runtime source waits
// before gosleuth looks for one again; each miss doubles the wait, up to
// connectRetryMax. A look (Discover reads the process's status, environ,
// cgroup, mountinfo and build info) costs about a millisecond, and most Go
// processes of a host never get an agent: looking at each every minute cost
// about as much as all the exporter's /proc reads on a host of 30 of them.
// An agent is started with its process, which is looked at on its second
// sample, so the first miss is the one that matters.
const (
	connectRetry    = time.Minute
	connectRetryMax = 16 * time.Minute
)

// readTimeout bounds one runtime read, so a stuck agent cannot stall the
// sampler.
const readTimeout = 500 * time.Millisecond

// memoryEvery is how often a process read from its memory (no agent) is
// read again: a census walks every goroutine record (about 40 ms of CPU at
// 200,000 goroutines), so between reads the last sample stands.
const memoryEvery = 10 * time.Second

// rtProc is one Go process's runtime source.
type rtProc struct {
	src    goruntime.Source
	tried  time.Time
	wait   time.Duration      // before the next look, after a miss
	prev   map[string]float64 // cumulative values at the last read
	last   *goruntime.Sample  // the last sample of a memory source
	lastAt time.Time
}

// rtMetric is how one runtime/metrics name is exported.
type rtMetric struct {
	name       string // runtime/metrics name
	prom       string // gosleuth_ + client_golang's name
	cumulative bool
	help       string
}

// rtCatalog maps runtime/metrics names (of this build's Go) to their export.
var rtCatalog = func() map[string]rtMetric {
	m := map[string]rtMetric{}
	for _, d := range metrics.All() {
		if d.Kind != metrics.KindUint64 && d.Kind != metrics.KindFloat64 {
			continue
		}
		m[d.Name] = rtMetric{name: d.Name, prom: "gosleuth_" + goruntime.PromName(d), cumulative: d.Cumulative,
			help: "Summed over the group's Go processes with a runtime source (" + d.Name + "): " + strings.TrimSpace(d.Description)}
	}
	return m
}()

// rtGroup holds one group's runtime sums.
type rtGroup struct {
	counters map[string]float64 // cumulative: added while watched
	gauges   map[string]float64 // last readings, summed over processes
	procs    int                // processes with a source at the last sample
}

// sampleRuntime reads the runtime sources of the Go processes in the
// current snapshot, connecting to new ones (at most once a minute each).
func (e *Exporter) sampleRuntime(now time.Time) {
	for _, g := range e.rt {
		clear(g.gauges)
		g.procs = 0
	}
	for i := range e.cur.Procs {
		p := &e.cur.Procs[i]
		if p.GoVersion == "" {
			continue
		}
		id := procID{p.PID, p.StartTime}
		if _, grouped := e.procGroup[id]; !grouped {
			continue // seen once so far: short-lived until seen again
		}
		rp := e.rtProcs[id]
		if rp == nil {
			rp = &rtProc{}
			e.rtProcs[id] = rp
		}
		if rp.src == nil {
			if !rp.tried.IsZero() && now.Sub(rp.tried) < rp.wait {
				continue
			}
			rp.tried = now
			rp.wait = min(max(2*rp.wait, connectRetry), connectRetryMax)
			ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
			src, _, err := goruntime.Connect(ctx, int(p.PID), goruntime.Options{ProcRoot: e.cfg.ProcRoot, NoMemory: e.cfg.NoMemory})
			cancel()
			if err != nil {
				continue
			}
			rp.src, rp.wait = src, 0
		}
		var (
			smp *goruntime.Sample
			err error
		)
		if rp.last != nil && rp.src.Kind() == "memory" && now.Sub(rp.lastAt) < memoryEvery {
			smp = rp.last
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
			smp, err = rp.src.Read(ctx)
			cancel()
			if err == nil && rp.src.Kind() == "memory" {
				rp.last, rp.lastAt = smp, now
			}
		}
		if err != nil || smp.Raw == nil {
			rp.src.Close()
			rp.src, rp.prev, rp.last = nil, nil, nil
			continue
		}
		key := e.procGroup[id]
		g := e.rt[key]
		if g == nil {
			g = &rtGroup{counters: map[string]float64{}, gauges: map[string]float64{}}
			e.rt[key] = g
		}
		g.procs++
		first := rp.prev == nil
		if first {
			rp.prev = map[string]float64{}
		}
		for name, m := range smp.Raw {
			c, ok := rtCatalog[name]
			if !ok || (m.Kind != 'u' && m.Kind != 'f') {
				continue
			}
			v := m.Value()
			if !c.cumulative {
				g.gauges[name] += v
				continue
			}
			// The first reading of a process (or of a metric new to it) is
			// its baseline: only what it adds while watched is counted.
			if old, seen := rp.prev[name]; seen && !first && v >= old {
				g.counters[name] += v - old
			} else {
				g.counters[name] += 0 // the series exists from the first reading
			}
			rp.prev[name] = v
		}
	}
	for id, rp := range e.rtProcs {
		if _, ok := e.procGroup[id]; !ok {
			if rp.src != nil {
				rp.src.Close()
			}
			delete(e.rtProcs, id)
		}
	}
}

// RuntimeSeries is one exported runtime value of a group.
type RuntimeSeries struct {
	Prom, Help string
	Counter    bool
	Kind, Name string
	Value      float64
}

// publishRuntime lists the runtime series in a stable order.
func (e *Exporter) publishRuntime() (out []RuntimeSeries, procs map[groupKey]int) {
	procs = map[groupKey]int{}
	for key, g := range e.rt {
		procs[key] = g.procs
		for name, v := range g.counters {
			c := rtCatalog[name]
			out = append(out, RuntimeSeries{Prom: c.prom, Help: c.help, Counter: true, Kind: key.kind, Name: key.name, Value: v})
		}
		for name, v := range g.gauges {
			c := rtCatalog[name]
			out = append(out, RuntimeSeries{Prom: c.prom, Help: c.help, Kind: key.kind, Name: key.name, Value: v})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Prom != out[b].Prom {
			return out[a].Prom < out[b].Prom
		}
		if out[a].Kind != out[b].Kind {
			return out[a].Kind < out[b].Kind
		}
		return out[a].Name < out[b].Name
	})
	return out, procs
}

// rtCollector writes the runtime series. It describes nothing (an
// unchecked collector): which runtime/metrics names exist depends on the Go
// versions of the processes watched.
type rtCollector struct{ e *Exporter }

func (rtCollector) Describe(chan<- *prometheus.Desc) {}

func (c rtCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.e.Last()
	if err != nil {
		return
	}
	descs := map[string]*prometheus.Desc{}
	for _, r := range s.Runtime {
		d := descs[r.Prom]
		if d == nil {
			d = prometheus.NewDesc(r.Prom, r.Help, groupLabels, nil)
			descs[r.Prom] = d
		}
		t := prometheus.GaugeValue
		if r.Counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(d, t, r.Value, r.Kind, r.Name)
	}
	for _, g := range s.Groups {
		if g.RuntimeSources > 0 {
			ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(g.RuntimeSources), g.Kind, g.Name)
		}
	}
}

var descSources = prometheus.NewDesc("gosleuth_group_go_runtime_sources",
	"Go processes of the group whose runtime gosleuth reads (through its agent); the gosleuth_go_* series sum over these.", groupLabels, nil)
