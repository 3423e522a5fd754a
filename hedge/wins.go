package hedge

import (
	"sync"
	"sync/atomic"
	"time"
)

// The win-rate switch judges hedges in windows of winWindow outcomes.
// While it is on, a hedge opportunity is still sent as a probe once
// probeEvery<<(level-1) opportunities and probeInterval<<(level-1) have
// passed since the last probe, so that the switch learns when hedges win
// again. Each window of probes that still loses raises the level, up to
// maxProbeLevel: one probe in 80 opportunities and 8 s by default.
const (
	winWindow     = 20 // hedges per judged window
	probeEvery    = 10 // opportunities per probe at level 1
	maxProbeLevel = 4
)

// defaultProbeInterval is the least time between probes at level 1. The
// count alone would let a busy client probe dozens of times a second,
// which near capacity is itself the load the switch is meant to spare.
const defaultProbeInterval = time.Second

// winGate pauses hedging while too few hedges win: near capacity, or when
// every attempt takes about as long as any other, a hedge only queues
// behind its primary and adds load without ever answering first.
type winGate struct {
	level     atomic.Int32  // 0: hedging open; k > 0: paused, probing at level k
	skips     atomic.Uint64 // hedge opportunities since the last probe
	lastProbe atomic.Int64  // unix ns of the last probe, or of the pause

	mu        sync.Mutex
	sent, won uint64 // hedges in the current window, and wins among them
}

// probe is asked for each hedge opportunity. It reports whether the gate
// lets it through: always when open; while paused, only as a probe, once
// enough opportunities and enough time (interval at level 1) have passed
// since the last one.
func (g *winGate) probe(now time.Time, interval time.Duration) bool {
	l := g.level.Load()
	if l == 0 {
		return true
	}
	if g.skips.Add(1) < probeEvery<<(l-1) {
		return false
	}
	last := g.lastProbe.Load()
	if now.UnixNano()-last < int64(interval<<(l-1)) || !g.lastProbe.CompareAndSwap(last, now.UnixNano()) {
		return false
	}
	g.skips.Store(0)
	return true
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
			g.lastProbe.Store(time.Now().UnixNano())
		}
		g.level.Store(min(l+1, maxProbeLevel))
	} else {
		g.level.Store(0)
	}
	g.sent, g.won = 0, 0
}
