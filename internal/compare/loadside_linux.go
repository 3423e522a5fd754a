package compare

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/load"
)

// loadTick is the engine's tick: the first tick of every step is its
// warm-up (the pacer starting again), so it is kept short.
func (r *runner) loadTick() time.Duration {
	return min(max(r.cfg.Window/20, 10*time.Millisecond), 100*time.Millisecond)
}

func (r *runner) engine(t *target) (*load.Engine, error) {
	if e := r.engines[t.side.URL]; e != nil {
		return e, nil
	}
	u, err := load.ParseURL(t.side.URL)
	if err != nil {
		return nil, fmt.Errorf("compare: %w: %w", ErrBadInput, err)
	}
	e, err := load.NewEngine(load.Config{URL: u, Connections: r.cfg.Connections, Tick: r.loadTick(), Warmup: r.loadTick(), MaxLag: r.cfg.MaxLag})
	if err != nil {
		return nil, fmt.Errorf("compare: start the load: %w", err)
	}
	r.engines[t.side.URL] = e
	return e, nil
}

// loadFailed turns a step whose connections were refused into an error.
func (r *runner) loadFailed(t *target, res *load.StepResult) error {
	if n := res.ErrorKinds["refused"]; n > 0 && n*2 >= res.Requests {
		return fmt.Errorf("compare: %w: side %s: %s refused %d of %d requests", ErrTarget, t.side.Name, t.side.URL, n, res.Requests)
	}
	return nil
}

// startLoad starts a load step on t's URL covering a window of d and
// returns when the step's first tick, its warm-up (the pacer starting
// again), is over; the channel gives the step's result. Without load it
// returns nil.
func (r *runner) startLoad(ctx context.Context, t *target, phase string, d time.Duration) (chan *load.StepResult, error) {
	if t.side.URL == "" {
		return nil, nil
	}
	e, err := r.engine(t)
	if err != nil {
		return nil, err
	}
	step := make(chan *load.StepResult, 1)
	tick := r.loadTick()
	go func() { step <- e.Step(ctx, phase, r.cfg.Rate, tick+d) }()
	time.Sleep(tick)
	return step, nil
}

// applyLoad adds the load's latency to w, or drops w when the load missed
// its rate.
func (r *runner) applyLoad(w *Window, res *load.StepResult, m measured) {
	w.Requests, w.AchievedRate = res.Requests, res.AchievedRate
	rate := r.cfg.Rate
	switch {
	case !res.Valid:
		w.Dropped, w.Why = true, strings.Join(res.Invalid, "; ")
	case res.Seconds > 0 && math.Abs(res.AchievedRate-rate)*res.Seconds > 0.005*rate*res.Seconds+2:
		w.Dropped, w.Why = true, fmt.Sprintf("achieved %.1f%% of the target rate (a window counts within 0.5%%)", 100*res.AchievedRate/rate)
	case res.Requests > 0 && float64(res.Errors) > 0.01*float64(res.Requests):
		w.Dropped, w.Why = true, fmt.Sprintf("%d errors in %d requests", res.Errors, res.Requests)
	}
	w.Values[metricP50.Name] = res.Latency.P50
	w.Values[metricP99.Name] = res.Latency.P99
	w.Values[metricP999.Name] = res.Latency.P999
	if res.Requests > 0 {
		// CPU-milliseconds per 1,000 requests over the same interval.
		cpuMS := m.values[metricCPU.Name] / 100 * m.seconds * 1e3
		reqs := res.AchievedRate * m.seconds
		if reqs > 0 {
			w.Values[metricCPUPerK.Name] = cpuMS / (reqs / 1e3)
		}
	}
}

func readGC(ctx context.Context, src goruntime.Source) *goruntime.Sample {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := src.Read(cctx)
	if err != nil {
		return nil
	}
	return s
}
