package load

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// The spike rule: a window's P99 is a spike when it is spikeFactor times
// the step's median window P99 and spikeFloor above it: a wait for a CPU
// on a busy host (a scheduler time slice, a few milliseconds) is not a
// spike.
const (
	spikeFactor = 3
	spikeFloor  = 2 * time.Millisecond
)

// The tie rule: the spikes are tied to GC cycles when at least tieMin of
// them, and at least half, fall within a cycle, and chance would put that
// many there with probability tieP at most. Half: the line must explain
// most spikes, not an excess among many from elsewhere (a stalled host
// both lengthens cycles and slows requests).
const (
	tieMin = 3
	tieP   = 0.01
)

// maxSpikesListed bounds GCSpikes.List.
const maxSpikesListed = 200

// GCSpikes sets the run's P99 spikes beside the target's GC cycles, read
// from its memory while the load ran.
type GCSpikes struct {
	// PollMS is the GC clock's period: how often the cycle count and the
	// latest cycle's start and end were read, and the margin on each side
	// of a cycle within which a spike counts as in it.
	PollMS float64 `json:"gc_poll_ms"`
	// WindowMS is the width of the windows the latency is cut into (by
	// each request's intended send time), SpikeRule the rule that makes
	// one a spike.
	WindowMS  float64 `json:"window_ms"`
	SpikeRule string  `json:"spike_rule"`
	Windows   int     `json:"windows"`
	// Spikes counts spikes (runs of spike windows, with the windows
	// without any answer between or just before them; windows hold the
	// requests due in them), InGC those whose onset (the first request of
	// the first spike window to reach its P99, or the answerless windows
	// just before) meets a GC cycle widened by PollMS on each side: a
	// cycle can cause a spike that begins in it, not one that began before.
	// Expected is how many would by chance (each onset placed anywhere in
	// its step), PValue the probability of InGC or more by chance.
	Spikes   int     `json:"spikes"`
	InGC     int     `json:"spikes_in_gc"`
	Expected float64 `json:"expected_in_gc_by_chance"`
	PValue   float64 `json:"p_value"`
	// GCTimeShare is the share of the measured time inside GC cycles.
	GCTimeShare float64 `json:"gc_time_share"`
	// Cycles counts the cycles in the measured time, CyclesStartRead those
	// whose start was read (the others began between two polls).
	Cycles          int `json:"gc_cycles"`
	CyclesStartRead int `json:"gc_cycles_start_read"`
	// AssistShare is mark assists' share of the GC's CPU in the cycles
	// that spikes fall within; AssistShareAll in every cycle measured.
	AssistShare *float64 `json:"assist_share_in_spike_cycles,omitempty"`
	// GCCores is the GC's CPU in those cycles over their length: how many
	// cores it kept busy while they ran (its idle-time workers included).
	GCCores        *float64 `json:"gc_cores_in_spike_cycles,omitempty"`
	AssistShareAll *float64 `json:"assist_share_all_cycles,omitempty"`
	// Tied says the spikes are tied to GC cycles (see the tie rule in
	// docs/load.md); Summary is then the report's line.
	Tied         bool   `json:"tied"`
	Summary      string `json:"summary,omitempty"`
	Polls        int    `json:"polls"`
	PollFailures int    `json:"poll_failures,omitempty"`
	// LateRequests counts answers left out of the windows (collected after
	// their window closed, or ended between steps).
	LateRequests int64   `json:"late_requests,omitempty"`
	List         []Spike `json:"spike_list,omitempty"`
	// GCCycles lists the cycles (report.json only).
	GCCycles []GCCycle `json:"gc_cycle_list,omitempty"`
	Note     string    `json:"note,omitempty"`
}

// Spike is one P99 spike.
type Spike struct {
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
	// Onset is where the slowness began (see GCSpikes.InGC).
	Onset float64 `json:"onset_s"`
	Step  int     `json:"step"`
	// P99MS is the highest window P99 in the spike, MedianMS the step's
	// median window P99.
	P99MS    float64 `json:"p99_ms"`
	MedianMS float64 `json:"step_median_p99_ms"`
	InGC     bool    `json:"in_gc"`
}

// interval is a span of the engine clock, [a, b).
type interval struct{ a, b int64 }

// union sorts and merges ivs.
func union(ivs []interval) []interval {
	slices.SortFunc(ivs, func(x, y interval) int { return cmp.Compare(x.a, y.a) })
	var out []interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.a <= out[n-1].b {
			out[n-1].b = max(out[n-1].b, iv.b)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// overlaps reports whether [a, b) meets any interval of u (sorted,
// disjoint).
func overlaps(u []interval, a, b int64) bool {
	i := sort.Search(len(u), func(i int) bool { return u[i].b > a })
	return i < len(u) && u[i].a < b
}

// covered is the length of [a, b) inside u.
func covered(u []interval, a, b int64) int64 {
	var n int64
	for i := sort.Search(len(u), func(i int) bool { return u[i].b > a }); i < len(u) && u[i].a < b; i++ {
		n += min(u[i].b, b) - max(u[i].a, a)
	}
	return n
}

// stepSpan is a step's measured windows on the window grid.
type stepSpan struct {
	first, last int64 // starts of the first and last window
	median      uint32
}

// spikeRun is a run of spike windows, from a to b. Its onset is where
// the slowness began: the first slow request of its first spike window,
// or, where windows without any answer come just before (a stall too long
// for any answer to close with its window), from the first of them.
type spikeRun struct {
	a, b   int64
	oa, ob int64 // the onset, [oa, ob)
	step   int
	peak   uint32
	in     bool
}

// analyzeGCSpikes finds the P99 spikes in wins (windows of width ns) and
// matches them with cycles, widened by the poll period.
func analyzeGCSpikes(wins []fineWin, width int64, cycles []gcCycle, poll time.Duration) *GCSpikes {
	g := &GCSpikes{PollMS: ms(poll), WindowMS: float64(width) / 1e6,
		SpikeRule: fmt.Sprintf("a window's p99 at least %dx its step's median window p99 and %s above it", spikeFactor, spikeFloor)}
	// The measured windows, by step.
	spans := map[int]*stepSpan{}
	var order []int
	byStep := map[int][]uint32{}
	var measured []fineWin
	for _, w := range wins {
		if w.warmup || w.n == 0 {
			continue
		}
		measured = append(measured, w)
		s, ok := spans[w.step]
		if !ok {
			s = &stepSpan{first: w.start, last: w.start}
			spans[w.step] = s
			order = append(order, w.step)
		}
		s.first, s.last = min(s.first, w.start), max(s.last, w.start)
		byStep[w.step] = append(byStep[w.step], w.p99)
	}
	g.Windows = len(measured)
	if len(measured) == 0 {
		g.Note = "no measured window"
		return g
	}
	for st, v := range byStep {
		slices.Sort(v)
		spans[st].median = v[len(v)/2]
	}
	// Spikes: runs of spike windows, joined across windows without any
	// answer (a stall answers nothing), and reaching back over the
	// answerless windows just before them.
	var runs []spikeRun
	var prevEnd int64 = math.MinInt64
	prevStep := -1
	open := false
	for _, w := range measured {
		sp := spans[w.step]
		med := sp.median
		spike := float64(w.p99) >= spikeFactor*float64(med) && int64(w.p99)-int64(med) >= spikeFloor.Microseconds()
		if w.step != prevStep {
			open, prevEnd = false, sp.first
		}
		switch {
		case spike && open:
			r := &runs[len(runs)-1]
			r.b, r.peak = w.start+width, max(r.peak, w.p99)
		case spike:
			r := spikeRun{a: max(prevEnd, sp.first), b: w.start + width, oa: w.tail, ob: w.tail + 1, step: w.step, peak: w.p99}
			if r.a < w.start {
				r.oa = r.a
			}
			r.ob = max(r.ob, r.oa+1)
			runs = append(runs, r)
			open = true
		default:
			open = false
		}
		prevEnd, prevStep = w.start+width, w.step
	}
	// GC cycles, widened by the poll period: the requests due just before
	// a cycle are still in flight when it starts, and a queue built up in
	// it drains after its end.
	m := int64(poll)
	var wide, exact []interval
	for _, c := range cycles {
		wide = append(wide, interval{c.start - m, c.end + m})
		exact = append(exact, interval{c.start, max(c.end, c.start+1)})
	}
	wide, exact = union(wide), union(exact)
	// Measured time and the cycles in it.
	var total, inGC int64
	var assistAll, gcAll time.Duration
	cpuAll := false
	for _, st := range order {
		sp := spans[st]
		a, b := sp.first, sp.last+width
		total += b - a
		inGC += covered(exact, a, b)
	}
	inMeasured := func(a, b int64) bool {
		for _, st := range order {
			if sp := spans[st]; a < sp.last+width && b > sp.first {
				return true
			}
		}
		return false
	}
	for _, c := range cycles {
		if !inMeasured(c.start, max(c.end, c.start+1)) {
			continue
		}
		g.Cycles++
		if c.startRead {
			g.CyclesStartRead++
		}
		g.GCCycles = append(g.GCCycles, c.public())
		if c.hasCPU {
			cpuAll = true
			assistAll += c.assist
			gcAll += c.total
		}
	}
	if total > 0 {
		g.GCTimeShare = float64(inGC) / float64(total)
	}
	if cpuAll && gcAll > 0 {
		v := float64(assistAll) / float64(gcAll)
		g.AssistShareAll = &v
	}
	// Which spikes fall within a cycle, and how many would by chance.
	probs := make([]float64, 0, len(runs))
	chance := map[[2]int64]float64{}
	var assist, gcCPU time.Duration
	var gcWall int64
	counted := map[int]bool{} // cycles whose CPU is summed
	for i := range runs {
		r := &runs[i]
		r.in = overlaps(wide, r.oa, r.ob)
		if r.in {
			g.InGC++
			for k, c := range cycles {
				if c.hasCPU && !counted[k] && c.end+m > r.oa && c.start-m < r.ob {
					counted[k] = true
					assist += c.assist
					gcCPU += c.total
					gcWall += c.end - c.start
				}
			}
		}
		sp := spans[r.step]
		key := [2]int64{int64(r.step), r.ob - r.oa}
		p, ok := chance[key]
		if !ok {
			p = placeChance(wide, sp.first, sp.last+width, r.ob-r.oa)
			chance[key] = p
		}
		probs = append(probs, p)
		g.Expected += p
		if len(g.List) < maxSpikesListed {
			g.List = append(g.List, Spike{Start: float64(r.a) / 1e9, End: float64(r.b) / 1e9, Onset: float64(r.oa) / 1e9, Step: r.step,
				P99MS: float64(r.peak) / 1e3, MedianMS: float64(sp.median) / 1e3, InGC: r.in})
		}
	}
	g.Spikes = len(runs)
	g.PValue = tailAtLeast(probs, g.InGC)
	if gcCPU > 0 {
		v := float64(assist) / float64(gcCPU)
		g.AssistShare = &v
		if gcWall > 0 {
			c := float64(gcCPU) / float64(gcWall)
			g.GCCores = &c
		}
	}
	g.Tied = g.InGC >= tieMin && 2*g.InGC >= g.Spikes && g.PValue <= tieP
	if g.Tied {
		g.Summary = fmt.Sprintf("%d of %d P99 spikes fall within GC cycles", g.InGC, g.Spikes)
		if g.AssistShare != nil {
			g.Summary += fmt.Sprintf(" (assist %.0f%% of GC CPU in those intervals", 100**g.AssistShare)
			if g.GCCores != nil {
				g.Summary += fmt.Sprintf(", the GC running on %.1f cores there", *g.GCCores)
			}
			g.Summary += ")"
		}
		g.Summary += fmt.Sprintf("; %.1f would by chance: GC cycles cover %.0f%% of the time (p = %.2g); GC clock read from the target's memory every %g ms, spikes in %g ms windows",
			g.Expected, 100*g.GCTimeShare, g.PValue, g.PollMS, g.WindowMS)
	}
	return g
}

// placeChance is the probability that a span of length n placed anywhere
// within [a, b) meets u: the share of the places x in [a, b-n] where
// [x, x+n) does, that is where x lies in u with each interval reaching n
// earlier.
func placeChance(u []interval, a, b, n int64) float64 {
	if b-n <= a {
		return 1
	}
	grown := make([]interval, len(u))
	for i, iv := range u {
		grown[i] = interval{iv.a - n, iv.b}
	}
	return float64(covered(union(grown), a, b-n)) / float64(b-n-a)
}

// tailAtLeast is P(X >= k) where X counts successes of independent trials
// with probabilities ps (a Poisson-binomial distribution).
func tailAtLeast(ps []float64, k int) float64 {
	if k <= 0 {
		return 1
	}
	d := make([]float64, len(ps)+1) // d[j]: P(j successes so far)
	d[0] = 1
	for i, p := range ps {
		for j := i + 1; j >= 1; j-- {
			d[j] = d[j]*(1-p) + d[j-1]*p
		}
		d[0] *= 1 - p
	}
	var s float64
	for j := k; j < len(d); j++ {
		s += d[j]
	}
	return min(s, 1)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// public is c in seconds since the run started.
func (c gcCycle) public() GCCycle {
	g := GCCycle{Start: float64(c.start) / 1e9, End: float64(c.end) / 1e9, StartRead: c.startRead, UnderWay: c.underW,
		PauseMS: ms(c.pause)}
	if c.hasCPU {
		a, t := ms(c.assist), ms(c.total)
		g.AssistMS, g.GCCPUMS = &a, &t
	}
	return g
}

// gcSpikesText says what the matching found, tied or not (the text report
// prints only a tie).
func gcSpikesText(g *GCSpikes) string {
	switch {
	case g.Tied:
		return g.Summary
	case g.Spikes == 0:
		return fmt.Sprintf("no P99 spike (%s) in %d windows of %g ms; %d GC cycles, read every %g ms",
			g.SpikeRule, g.Windows, g.WindowMS, g.Cycles, g.PollMS)
	}
	return fmt.Sprintf("%d of %d P99 spikes fall within GC cycles, %.1f would by chance (p = %.2g): not tied to GC; %d GC cycles, read every %g ms",
		g.InGC, g.Spikes, g.Expected, g.PValue, g.Cycles, g.PollMS)
}
