package hedge

import (
	"sync"
	"sync/atomic"
)

// The win-rate switch judges hedges in windows of winWindow outcomes.
// While it is on, one hedge opportunity in probeEvery<<(level-1) is still
// sent as a probe, so that the switch learns when hedges win again; each
// window of probes that still loses halves the probe share, down to one in
// probeEvery<<(maxProbeLevel-1).
const (
	winWindow     = 20 // hedges per judged window
	probeEvery    = 10 // probe share at level 1: one opportunity in 10
	maxProbeLevel = 4  // lowest probe share: one in 80
)

// winGate pauses hedging while too few hedges win: near capacity, or when
// every attempt takes about as long as any other, a hedge only queues
// behind its primary and adds load without ever answering first.
type winGate struct {
	level atomic.Int32  // 0: hedging open; k > 0: paused, probing at level k
	skips atomic.Uint64 // hedge opportunities seen while paused

	mu        sync.Mutex
	sent, won uint64 // hedges in the current window, and wins among them
}

// probe is asked for each hedge opportunity. It reports whether the gate
// lets it through: always when open, and one in probeEvery<<(level-1)
// while paused.
func (g *winGate) probe() bool {
	l := g.level.Load()
	if l == 0 {
		return true
	}
	return g.skips.Add(1)%(probeEvery<<(l-1)) == 0
}

// paused reports whether the gate is on.
func (g *winGate) paused() bool { return g.level.Load() > 0 }

// record takes the outcome of one request that sent hedges: how many, and
// whether one of them answered it. Each full window is judged against
// minRate: below it the gate closes, or probes less often if it was
// already closed; at or above it the gate opens. A closed gate opens as
// soon as its window has enough wins to pass whatever the rest of it
// brings, so that hedging resumes after a few winning probes.
func (g *winGate) record(hedges int, won bool, minRate float64) {
	if hedges <= 0 || minRate <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent += uint64(hedges)
	if won {
		g.won++
	}
	if g.sent < winWindow {
		if g.level.Load() > 0 && float64(g.won) >= minRate*winWindow {
			g.level.Store(0)
			g.sent, g.won = 0, 0
		}
		return
	}
	if float64(g.won) < minRate*float64(g.sent) {
		l := g.level.Load()
		if l == 0 {
			g.skips.Store(0)
		}
		g.level.Store(min(l+1, maxProbeLevel))
	} else {
		g.level.Store(0)
	}
	g.sent, g.won = 0, 0
}
