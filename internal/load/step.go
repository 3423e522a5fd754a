package load

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// minAchieved is the share of the target rate a valid step achieves.
const minAchieved = 0.99

// Percentiles are latencies in milliseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func percentiles(h *hdr.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	ms := func(us int64) float64 { return float64(us) / 1e3 }
	return Percentiles{
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), P999: ms(h.ValueAtQuantile(99.9)),
		Max: ms(h.Max()), Mean: h.Mean() / 1e3,
	}
}

// Lag is the generator's own lateness in milliseconds.
type Lag struct {
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Tick is one point of the time series.
type Tick struct {
	// T is the end of the tick in seconds since the run started.
	T          float64 `json:"t_s"`
	Step       int     `json:"step"`
	TargetRate float64 `json:"target_rate"`
	// Warmup is true for ticks dropped from the step's histograms.
	Warmup bool `json:"warmup"`
	// Requests counts the responses and errors recorded in the tick, Rate
	// the requests sent per second.
	Requests int64   `json:"requests"`
	Rate     float64 `json:"rate"`
	Errors   int64   `json:"errors"`
	// Latency is corrected (from the intended send time).
	Latency        Percentiles `json:"latency_ms"`
	UncorrectedP99 float64     `json:"uncorrected_p99_ms"`
	Lag            Lag         `json:"generator_lag_ms"`
	// Backlog is the number of requests due but not yet sent at the end of
	// the tick; InFlight those sent and not answered.
	Backlog     int64   `json:"backlog"`
	InFlight    int64   `json:"in_flight"`
	Connections int64   `json:"connections"`
	GenCPU      float64 `json:"generator_cpu_cores"`
	// Target is the watched process over the tick.
	Target *TargetTick `json:"target,omitempty"`
}

// StepResult is one step's measurement, after its warm-up.
type StepResult struct {
	Index int    `json:"step"`
	Phase string `json:"phase,omitempty"`
	// TargetRate is the requested rate; 0 means a closed loop (as fast as
	// the connections allow).
	TargetRate    float64 `json:"target_rate"`
	Seconds       float64 `json:"seconds"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	// Requests counts the responses and errors recorded in the window;
	// AchievedRate is the rate at which requests were sent in it.
	Requests     int64   `json:"requests"`
	AchievedRate float64 `json:"achieved_rate"`
	// Valid is false when the generator could not hold the rate or was
	// late (Invalid says why), so the latency is not the server's alone.
	Valid   bool     `json:"valid"`
	Invalid []string `json:"invalid_reasons,omitempty"`
	// GeneratorLate is true when the step is invalid because of the
	// generator itself (its lag, or a rate shortfall while connections were
	// free): worth repeating, usually a busy machine.
	GeneratorLate bool `json:"generator_late,omitempty"`
	// InFlightAtEnd counts requests sent and not yet answered when the
	// run's last step ended; Unanswered those still without an answer a
	// request timeout later (counted as timeouts in Errors).
	InFlightAtEnd int64 `json:"in_flight_at_end,omitempty"`
	Unanswered    int64 `json:"unanswered,omitempty"`
	// Latency is corrected (from the intended send time), Uncorrected from
	// the actual send.
	Latency     Percentiles `json:"latency_ms"`
	Uncorrected Percentiles `json:"uncorrected_latency_ms"`
	// Lag is each request's generator lag (actual send minus the later of
	// its intended time and the moment its connection was free); PacerLag
	// the pacer's own lateness in handing out send times.
	Lag      Lag   `json:"generator_lag_ms"`
	PacerLag Lag   `json:"pacer_lag_ms"`
	Errors   int64 `json:"errors"`
	// ErrorKinds counts errors by kind (refused, reset, timeout, http,
	// protocol, other); Status counts responses by status code.
	ErrorKinds     map[string]int64 `json:"error_kinds,omitempty"`
	Status         map[string]int64 `json:"status,omitempty"`
	MaxBacklog     int64            `json:"max_backlog"`
	MaxInFlight    int64            `json:"max_in_flight"`
	MaxConnections int64            `json:"max_connections"`
	// GenCPU is the generator's CPU in cores; ReqPerCPUSecond its efficiency.
	GenCPU          float64       `json:"generator_cpu_cores"`
	ReqPerCPUSecond float64       `json:"requests_per_generator_cpu_second"`
	Target          *TargetStats  `json:"target,omitempty"`
	SLA             *SLAStepCheck `json:"sla,omitempty"`
	Interrupted     bool          `json:"interrupted,omitempty"`

	hist, uhist *hdr.Histogram
}

// SLAStepCheck says whether a step met the SLA.
type SLAStepCheck struct {
	Met     bool    `json:"met"`
	ValueMS float64 `json:"value_ms"`
}

// Histogram returns the step's corrected latency histogram (microseconds).
func (r *StepResult) Histogram() *hdr.Histogram { return r.hist }

// UncorrectedHistogram returns the step's uncorrected latency histogram
// (microseconds).
func (r *StepResult) UncorrectedHistogram() *hdr.Histogram { return r.uhist }

type hlogLine struct {
	start, length float64 // seconds
	maxMS         float64
	payload       string
}

// Step runs one step at rate (requests per second; 0 is a closed loop)
// for dur, rounded up to whole ticks. Cancelling ctx ends it early; the
// result then covers what ran and is marked Interrupted.
func (e *Engine) Step(ctx context.Context, phase string, rate float64, dur time.Duration) *StepResult {
	c := &e.cfg
	nt := int(math.Ceil(float64(dur) / float64(c.Tick)))
	nt = max(nt, 1)
	warm := c.Warmup
	if warm == 0 {
		warm = max(c.Tick, min(time.Duration(nt)*c.Tick/10, 5*time.Second))
	}
	wt := int(math.Ceil(float64(warm) / float64(c.Tick)))
	if wt >= nt {
		wt = nt - 1
	}
	e.steps++
	res := &StepResult{Index: e.steps, Phase: phase, TargetRate: rate, hist: newHist(), uhist: newHist(),
		ErrorKinds: map[string]int64{}, Status: map[string]int64{}}
	agg, warmAgg := newSample(), newSample()
	lagMax, warmLagMax := newHist(), newHist()

	stop := make(chan struct{})
	pacerDone := make(chan struct{})
	t0 := e.now()
	if e.clock != nil {
		if e.fine == nil {
			e.fine = newFineSeries(fineWidth(rate, c.Tick), c.Tick)
		}
		e.fine.startStep(res.Index, t0, wt)
	}
	span := int64(nt) * int64(c.Tick)
	var n int64
	interval := 0.0
	e.issued.Store(0)
	e.pacerLag.Reset()
	e.maxOpen.Store(e.open.Load())
	if rate > 0 {
		n = int64(math.Round(rate * float64(span) / 1e9))
		interval = 1e9 / rate
		go e.pace(t0, n, interval, stop, pacerDone)
	} else {
		e.closedRun.Store(true)
		go func() {
			defer close(pacerDone)
			for range c.Connections {
				select {
				case e.tickets <- closedLoopTicket:
				case <-stop:
					return
				}
			}
		}()
	}

	cpuPrev, tPrev := selfCPU(), t0
	sentPrev := e.sent.Load()
	cpuStart, sentStart := cpuPrev, sentPrev
	sentMeasured0 := sentPrev
	var cpuMeasured0 time.Duration
	var tMeasured0 int64
	var tgt0 targetReading
	if e.watch != nil {
		tgt0 = e.watch.read()
	}
	tgtStart, tgtPrev := tgt0, tgt0
	var tgtStats, tgtWarm *targetAcc
	if e.watch != nil {
		tgtStats, tgtWarm = &targetAcc{}, &targetAcc{}
	}
	timer := time.NewTimer(0)
	<-timer.C
	k := 0
	for k = 1; k <= nt; k++ {
		end := t0 + int64(k)*int64(c.Tick)
		timer.Reset(time.Duration(end - e.now()))
		select {
		case <-timer.C:
		case <-ctx.Done():
			res.Interrupted = true
		}
		if res.Interrupted {
			break
		}
		now := e.now()
		if k == wt+1 {
			// The measured window starts at the end of the warm-up.
			cpuMeasured0, tMeasured0, sentMeasured0 = cpuPrev, tPrev, sentPrev
			if e.watch != nil {
				tgt0 = tgtPrev
			}
		}
		e.collect()
		s := e.tick
		if e.fine != nil {
			// Windows close a tick after their end: the requests due in
			// them have had a tick to answer.
			e.fine.add(s.fine, t0+int64(k-1)*int64(c.Tick))
		}
		cpu := selfCPU()
		sent := e.sent.Load()
		sec := float64(now-tPrev) / 1e9
		var due int64
		if rate > 0 {
			due = min(n, int64(float64(now-t0)/interval)+1)
		}
		tk := Tick{
			T: float64(now) / 1e9, Step: res.Index, TargetRate: rate, Warmup: k <= wt,
			Requests: s.done, Rate: float64(sent-sentPrev) / sec, Errors: s.errors(),
			Latency: percentiles(s.corrected), UncorrectedP99: float64(s.uncorrected.ValueAtQuantile(99)) / 1e3,
			Lag:     Lag{P99: float64(s.lag.ValueAtQuantile(99)) / 1e3, Max: float64(s.lag.Max()) / 1e3},
			Backlog: max(0, due-e.issued.Load()), InFlight: e.inFlight.Load(), Connections: e.open.Load(),
			GenCPU: (cpu - cpuPrev).Seconds() / sec,
		}
		if s.lag.TotalCount() == 0 {
			tk.Lag = Lag{}
		}
		if e.watch != nil {
			r := e.watch.read()
			tk.Target = tickTarget(tgtPrev, r)
			if k > wt {
				tgtStats.add(r)
			} else {
				tgtWarm.add(r)
			}
			tgtPrev = r
		}
		if payload, err := s.corrected.EncodeV2(); err == nil && s.corrected.TotalCount() > 0 {
			e.hlog = append(e.hlog, hlogLine{start: float64(tPrev) / 1e9, length: sec,
				maxMS: float64(s.corrected.Max()) / 1e3, payload: string(payload)})
		}
		if k > wt {
			agg.add(s)
			lagMax.Merge(s.lag)
			res.MaxBacklog = max(res.MaxBacklog, tk.Backlog)
			res.MaxInFlight = max(res.MaxInFlight, tk.InFlight)
		} else {
			warmAgg.add(s)
			warmLagMax.Merge(s.lag)
		}
		e.ticks = append(e.ticks, tk)
		if c.OnTick != nil {
			c.OnTick(tk)
		}
		cpuPrev, tPrev, sentPrev = cpu, now, sent
	}
	timer.Stop()
	close(stop)
	e.closedRun.Store(false)
	<-pacerDone
	if e.fine != nil {
		// The step's last windows close with the answers in so far.
		e.fine.close(t0 + int64(k-1)*int64(c.Tick))
	}
	if e.pacerLag.TotalCount() > 0 {
		res.PacerLag = Lag{P99: float64(e.pacerLag.ValueAtQuantile(99)) / 1e3, Max: float64(e.pacerLag.Max()) / 1e3}
	}

	measuredTicks := min(k-1, nt) - wt
	if measuredTicks <= 0 && k > 1 {
		// Interrupted inside the warm-up: report what ran, warm-up included.
		agg, lagMax, tgtStats = warmAgg, warmLagMax, tgtWarm
		tMeasured0, cpuMeasured0, sentMeasured0, tgt0 = t0, cpuStart, sentStart, tgtStart
		measuredTicks, wt = k-1, 0
		res.invalid("interrupted during the warm-up: the figures include it")
	}
	res.WarmupSeconds = float64(wt) * c.Tick.Seconds()
	if measuredTicks > 0 {
		res.Seconds = float64(tPrev-tMeasured0) / 1e9
	}
	res.Requests = agg.done
	if res.Seconds > 0 {
		res.AchievedRate = float64(sentPrev-sentMeasured0) / res.Seconds
		res.GenCPU = (cpuPrev - cpuMeasured0).Seconds() / res.Seconds
		if cpuPrev > cpuMeasured0 {
			res.ReqPerCPUSecond = float64(agg.done) / (cpuPrev - cpuMeasured0).Seconds()
		}
	}
	res.hist.Merge(agg.corrected)
	res.uhist.Merge(agg.uncorrected)
	res.Latency = percentiles(agg.corrected)
	res.Uncorrected = percentiles(agg.uncorrected)
	if agg.lag.TotalCount() > 0 {
		res.Lag = Lag{P99: float64(agg.lag.ValueAtQuantile(99)) / 1e3, Max: float64(lagMax.Max()) / 1e3}
	}
	res.Errors = agg.errors()
	for i, v := range agg.errs {
		if v > 0 {
			res.ErrorKinds[ErrKind(i).String()] = v
		}
	}
	for code, v := range agg.status {
		if v > 0 {
			res.Status[strconv.Itoa(code)] = v
		}
	}
	res.MaxConnections = e.maxOpen.Load()
	if e.watch != nil && measuredTicks > 0 {
		res.Target = tgtStats.stats(tgt0, e.watch)
	}
	res.Valid = true
	if res.Seconds == 0 {
		res.invalid("no measured interval after the warm-up")
	}
	// Requests that found no connection were never sent, and re-dialling
	// delays the next: when connections fail, the server (or the
	// generator's descriptor limit) is the cause of a shortfall or lag.
	var connErrs []string
	for i, v := range agg.errs {
		if k := ErrKind(i); v > 0 && k.connectionFailure() {
			connErrs = append(connErrs, fmt.Sprintf("%d %s", v, k))
		}
	}
	// Two requests of slack: a short window's count moves by one or two
	// with where its edges fall.
	if rate > 0 && res.Seconds > 0 && res.AchievedRate*res.Seconds < minAchieved*rate*res.Seconds-2 {
		why := "the generator fell behind"
		switch {
		case len(connErrs) > 0:
			// Requests that found no connection were never sent: the
			// server (or the generator's descriptor limit) is the cause.
			why = "connections failed (" + strings.Join(connErrs, ", ") + ")"
		case res.MaxInFlight >= int64(c.Connections) || res.MaxBacklog > 0:
			why = "all connections were busy (server saturated, or too few connections)"
		default:
			res.GeneratorLate = true
		}
		res.invalid(fmt.Sprintf("achieved %.1f%% of the target rate: %s", 100*res.AchievedRate/rate, why))
	}
	if rate > 0 && res.Lag.P99 > float64(c.MaxLag)/1e6 {
		if len(connErrs) > 0 {
			res.invalid(fmt.Sprintf("generator lag p99 %.2f ms > %s while connections failed (%s)",
				res.Lag.P99, c.MaxLag, strings.Join(connErrs, ", ")))
		} else {
			res.GeneratorLate = true
			res.invalid(fmt.Sprintf("generator lag p99 %.2f ms > %s: the generator was late, latency is not the server's alone",
				res.Lag.P99, c.MaxLag))
		}
	}
	if res.Interrupted {
		res.invalid("interrupted")
	}
	switch {
	case res.Seconds > 0 && sentPrev == sentMeasured0 && rate > 0:
		// --rate 0.001 over 10 s: percentiles of nothing are not 0 ms.
		res.invalid("no request was sent in the measured interval")
	case res.Seconds > 0 && sentPrev > sentMeasured0 && agg.done == 0:
		res.invalid("no request was answered")
	}
	return res
}

func (r *StepResult) invalid(why string) {
	r.Valid = false
	r.Invalid = append(r.Invalid, why)
}

// pace hands out the step's n tickets at t0 + i*interval.
func (e *Engine) pace(t0, n int64, interval float64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	const early = 20 * time.Microsecond // not worth a sleep
	for i := int64(0); i < n; i++ {
		due := t0 + int64(float64(i)*interval)
		for {
			wait := time.Duration(due - e.now())
			if wait <= early {
				break
			}
			select {
			case <-stop:
				return
			default:
			}
			if err := e.sleeper.sleep(min(wait, 50*time.Millisecond)); err != nil {
				time.Sleep(min(wait, 50*time.Millisecond))
			}
		}
		e.pacerLag.RecordValue(max(1, (e.now()-due)/1000))
		select {
		case e.tickets <- due:
			e.issued.Add(1)
		case <-stop:
			return
		}
	}
}

// collect moves every shard's sample into e.tick.
func (e *Engine) collect() {
	e.tick.reset()
	for i, sh := range e.shards {
		old := sh.swap(e.spare[i])
		e.tick.add(old)
		old.reset()
		e.spare[i] = old
	}
}

// Drain waits until no request is in flight, at most d. It is used between
// the steps of a search so an overloaded step does not spill into the next.
func (e *Engine) Drain(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for e.inFlight.Load() > 0 && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}
