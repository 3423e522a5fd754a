package load

import (
	"cmp"
	"slices"
	"time"
)

// finePoint is one answered request: its intended send time on the engine
// clock and its corrected latency less the generator's lag, in
// microseconds.
type finePoint struct {
	at int64
	us uint32
}

// fineWin is one window of the fine latency series: the requests due in
// it (by their intended send time), their P99 and max.
type fineWin struct {
	start int64 // engine clock, ns
	// tail is the intended time of the first request due in the window
	// whose latency reached its P99: where, within a slow window, the
	// slowness began.
	tail     int64
	n        int32
	p99, max uint32 // µs
	step     int
	warmup   bool
}

// fineMinRequests is how many requests a window should hold at the step's
// rate: a P99 of fewer is its max.
const fineMinRequests = 50

// maxFineWindows bounds the series: an hour in windows of 10 ms.
const maxFineWindows = 360_000

// fineWidths are the window widths tried, shortest first; each divides a
// one-second tick, so a tick's end closes whole windows.
var fineWidths = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 125 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}

// fineWidth is the shortest window that divides tick and holds
// fineMinRequests at rate (20 ms for a closed loop, whose rate is not
// known ahead), else the tick.
func fineWidth(rate float64, tick time.Duration) time.Duration {
	for _, w := range fineWidths {
		if tick%w != 0 {
			continue
		}
		if rate == 0 && w >= 20*time.Millisecond || rate*w.Seconds() >= fineMinRequests {
			return w
		}
	}
	return tick
}

// fineSeries cuts the answered requests into short windows by their
// intended send time and keeps each window's count, P99 and max: the
// latency series at a resolution fine enough to set beside GC cycles. A
// stall shows from the moment it began (the requests due in it wait), not
// from when it ended (when they all finish at once). Windows are aligned
// to the step's start and divide the tick; a window closes a tick after
// its end, so answers up to a tick late are in it. Only the engine's tick
// loop uses it.
type fineSeries struct {
	width   int64
	tick    int64
	t0      int64 // the current step's start
	wt      int   // the step's warm-up ticks
	step    int
	pending []finePoint
	wins    []fineWin
	// late counts requests whose window had closed when they were
	// collected (answered more than a tick after their window, or due in
	// an earlier step): left out.
	late    int64
	scratch []uint32
}

func newFineSeries(width, tick time.Duration) *fineSeries {
	return &fineSeries{width: int64(width), tick: int64(tick)}
}

// startStep begins step's windows at t0; the first wt ticks are warm-up.
func (f *fineSeries) startStep(step int, t0 int64, wt int) {
	f.step, f.t0, f.wt = step, t0, wt
}

// add takes a tick's points and closes the windows that end by upTo.
func (f *fineSeries) add(pts []finePoint, upTo int64) {
	f.pending = append(f.pending, pts...)
	f.close(upTo)
}

// close turns the pending points of every window ending by upTo into
// that window's figures; points of later windows stay pending.
func (f *fineSeries) close(upTo int64) {
	if len(f.pending) == 0 {
		return
	}
	slices.SortFunc(f.pending, func(a, b finePoint) int { return cmp.Compare(a.at, b.at) })
	i := 0
	for i < len(f.pending) && f.pending[i].at < f.t0 {
		i++
	}
	f.late += int64(i)
	for i < len(f.pending) {
		idx := (f.pending[i].at - f.t0) / f.width
		start := f.t0 + idx*f.width
		if start+f.width > upTo {
			break
		}
		j := i
		f.scratch = f.scratch[:0]
		for j < len(f.pending) && f.pending[j].at < start+f.width {
			f.scratch = append(f.scratch, f.pending[j].us)
			j++
		}
		slices.Sort(f.scratch)
		n := len(f.scratch)
		p99 := f.scratch[(99*n+99)/100-1]
		tail := start
		for k := i; k < j; k++ {
			if f.pending[k].us >= p99 {
				tail = f.pending[k].at
				break
			}
		}
		if len(f.wins) < maxFineWindows {
			f.wins = append(f.wins, fineWin{start: start, tail: tail, n: int32(n), p99: p99,
				max: f.scratch[n-1], step: f.step, warmup: int((start-f.t0)/f.tick) < f.wt})
		}
		i = j
	}
	f.pending = append(f.pending[:0], f.pending[i:]...)
}
