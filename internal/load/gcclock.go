package load

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// DefaultGCPoll is the period at which the watched target's GC clock is
// read from its memory.
const DefaultGCPoll = 10 * time.Millisecond

// maxCycles bounds the GC cycles kept: a cycle every 10 ms for an hour.
const maxCycles = 360_000

// GCCycle is one GC cycle of the target, from the start of sweep
// termination to the end of mark termination (the part in which the
// world stops twice, write barriers are on and allocating goroutines
// assist), in seconds since the run started.
type GCCycle struct {
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
	// StartRead is false when the cycle began and ended between two polls:
	// its start is then the earlier poll (or the previous cycle's end), so
	// the interval holds the cycle.
	StartRead bool `json:"start_read"`
	// UnderWay marks a cycle still running at the last poll: its end is
	// that poll.
	UnderWay bool    `json:"under_way,omitempty"`
	PauseMS  float64 `json:"pause_ms"`
	// AssistMS and GCCPUMS are the CPU of mark assists and of the whole GC
	// in the cycle (shared evenly among cycles that ended between the same
	// two polls); absent where the release's layout does not show them.
	AssistMS *float64 `json:"assist_cpu_ms,omitempty"`
	GCCPUMS  *float64 `json:"gc_cpu_ms,omitempty"`
}

// clockReader reads a GC clock: gomem.GCClockReader.
type clockReader interface {
	Read() (gomem.GCClock, error)
	Ends(from, to uint32) ([]gomem.GCCycleEnd, error)
}

// gcClock polls the target's GC clock (gomem.GCClockReader) on a
// goroutine of its own and keeps the cycles it learns of, on the engine's
// clock. Reads only: the target is never stopped or written.
type gcClock struct {
	r      clockReader
	period time.Duration
	// mono0 and eng0 are CLOCK_MONOTONIC and the engine clock read
	// together: engine time = mono - mono0 + eng0.
	mono0, eng0 int64

	mu       sync.Mutex
	cycles   []gcCycle
	last     gomem.GCClock
	lastPoll int64 // engine clock of the last good poll
	polls    int
	fails    int
	// failsInRow counts the failed reads since the last good one.
	failsInRow int
	err        error // the last failed read

	stop, done chan struct{}
}

// gcCycle is a GCCycle on the engine clock.
type gcCycle struct {
	start, end        int64
	startRead, underW bool
	pause             time.Duration
	assist, total     time.Duration
	hasCPU            bool
}

// openGCClock opens process pid's memory and starts polling its GC clock
// every period. engNow reads the engine clock.
func openGCClock(root string, pid int, period time.Duration, engNow func() int64) (*gcClock, error) {
	p, err := gomem.Open(proc.NewFS(root), pid)
	if err != nil {
		return nil, err
	}
	r, err := p.NewGCClock()
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	mono0 := gomem.MonotonicNow()
	if mono0 == 0 {
		return nil, errors.New("CLOCK_MONOTONIC not readable")
	}
	c, err := newGCClock(r, period, mono0, engNow())
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	go c.run()
	return c, nil
}

// newGCClock takes a first reading of r; mono0 and eng0 are
// CLOCK_MONOTONIC and the engine clock read together. Its run polls.
func newGCClock(r clockReader, period time.Duration, mono0, eng0 int64) (*gcClock, error) {
	c := &gcClock{r: r, period: period, mono0: mono0, eng0: eng0, stop: make(chan struct{}), done: make(chan struct{})}
	first, err := r.Read()
	if err != nil {
		return nil, err
	}
	c.last, c.lastPoll = first, c.toEngine(first.Now)
	return c, nil
}

func (c *gcClock) toEngine(mono int64) int64 { return mono - c.mono0 + c.eng0 }

func (c *gcClock) run() {
	defer close(c.done)
	t := time.NewTicker(c.period)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			if !c.poll() {
				return
			}
		}
	}
}

// close stops the polling and waits for it.
func (c *gcClock) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// maxFailsInRow is how many reads in a row may fail before the polling
// stops: the target has exited.
const maxFailsInRow = 50

// poll reads the clock once and records the cycles that ended since the
// last poll: their ends from the runtime's ring, their starts where a
// poll saw them (the cycle under way at the last poll, or the latest one
// read now), else bounded by the last poll. It reports whether to go on.
func (c *gcClock) poll() bool {
	cur, err := c.r.Read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.fails++
		c.failsInRow++
		c.err = err
		return c.failsInRow < maxFailsInRow
	}
	c.failsInRow = 0
	c.polls++
	prev, prevPoll := c.last, c.lastPoll
	now := c.toEngine(cur.Now)
	if cur.Cycles != prev.Cycles {
		c.ended(prev, cur, prevPoll, now)
	}
	c.last, c.lastPoll = cur, now
	return true
}

// ended records the cycles prev.Cycles .. cur.Cycles-1.
func (c *gcClock) ended(prev, cur gomem.GCClock, prevPoll, now int64) {
	n := cur.Cycles - prev.Cycles
	if n > 1<<20 {
		return // the count went back: a torn or scribbled read
	}
	ends, err := c.r.Ends(prev.Cycles, cur.Cycles)
	wallToMono := time.Now().UnixNano() - gomem.MonotonicNow()
	if err != nil || len(ends) == 0 {
		// No ring: one interval since the last poll holds them all.
		c.add(gcCycle{start: c.floor(prevPoll), end: now}, prev, cur, 1)
		return
	}
	for i, e := range ends {
		endMono := e.End.UnixNano() - wallToMono
		// The latest completed cycle's end is also work.tEnd, on the
		// monotonic clock itself: exact where the two agree.
		last := i == len(ends)-1 && cur.End > 0 && abs(cur.End-endMono) < int64(time.Millisecond)
		if last {
			endMono = cur.End
		}
		cy := gcCycle{end: min(c.toEngine(endMono), now), pause: e.Pause}
		switch {
		case i == 0 && e.N == prev.Cycles && prev.InCycle() && prev.Start <= endMono:
			cy.start, cy.startRead = c.toEngine(prev.Start), true
		case last && !cur.InCycle() && cur.Start <= cur.End:
			cy.start, cy.startRead = c.toEngine(cur.Start), true
		default:
			cy.start = c.floor(prevPoll)
		}
		cy.start = min(cy.start, cy.end)
		c.add(cy, prev, cur, len(ends))
	}
}

// floor is the earliest a cycle not seen starting may have begun: the last
// poll, or the previous cycle's end if later.
func (c *gcClock) floor(prevPoll int64) int64 {
	if k := len(c.cycles); k > 0 {
		return max(prevPoll, c.cycles[k-1].end)
	}
	return prevPoll
}

// add keeps cy with its share of the GC CPU that the cycles ending
// between prev and cur took.
func (c *gcClock) add(cy gcCycle, prev, cur gomem.GCClock, shares int) {
	if prev.HasCPU && cur.HasCPU && cur.GCTotal >= prev.GCTotal && cur.Assist >= prev.Assist {
		cy.hasCPU = true
		cy.assist = (cur.Assist - prev.Assist) / time.Duration(shares)
		cy.total = (cur.GCTotal - prev.GCTotal) / time.Duration(shares)
	}
	if len(c.cycles) < maxCycles {
		c.cycles = append(c.cycles, cy)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// snapshot returns the cycles seen, with the one under way at the last
// poll (ending there), and the polls' counts.
func (c *gcClock) snapshot() (cycles []gcCycle, polls, fails int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cycles = append([]gcCycle(nil), c.cycles...)
	if l := c.last; l.InCycle() {
		s := c.toEngine(l.Start)
		if k := len(cycles); k == 0 || s > cycles[k-1].end {
			cycles = append(cycles, gcCycle{start: min(s, c.lastPoll), end: c.lastPoll, startRead: true, underW: true})
		}
	}
	return cycles, c.polls, c.fails, c.err
}
