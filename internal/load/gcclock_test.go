package load

import (
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/gomem"
)

// scriptedClock replays GC clock readings; its ring holds the end of
// each cycle given (by number), as wall-clock time.
type scriptedClock struct {
	reads []gomem.GCClock
	ends  map[uint32]int64 // cycle number -> end, CLOCK_MONOTONIC ns
	pause time.Duration
}

func (s *scriptedClock) Read() (gomem.GCClock, error) {
	c := s.reads[0]
	s.reads = s.reads[1:]
	return c, nil
}

func (s *scriptedClock) Ends(from, to uint32) ([]gomem.GCCycleEnd, error) {
	wallToMono := time.Now().UnixNano() - gomem.MonotonicNow()
	var out []gomem.GCCycleEnd
	for n := from; n < to; n++ {
		if e, ok := s.ends[n]; ok {
			out = append(out, gomem.GCCycleEnd{N: n, End: time.Unix(0, e+wallToMono), Pause: s.pause})
		}
	}
	return out, nil
}

// TestGCClockCycles: the cycles are read from the polls as the runtime
// kept them: a cycle seen under way gets its start from that poll; the
// latest cycle, seen ended, its start and end from work's times; one that
// began and ended between two polls starts at the earlier poll; the cycle
// under way at the last poll ends there; the GC CPU of cycles ending
// between the same polls is shared.
func TestGCClockCycles(t *testing.T) {
	if gomem.MonotonicNow() == 0 {
		t.Skip("no CLOCK_MONOTONIC here")
	}
	const ms = int64(time.Millisecond)
	base := gomem.MonotonicNow() // the target's clock, as the readings give it
	at := func(t int64) int64 { return base + t*ms }
	cpu := func(c gomem.GCClock, assist, total int64) gomem.GCClock {
		c.HasCPU, c.Assist, c.GCTotal = true, time.Duration(assist*ms), time.Duration(total*ms)
		return c
	}
	s := &scriptedClock{pause: 300 * time.Microsecond, ends: map[uint32]int64{0: at(150), 1: at(250), 2: at(320)}}
	s.reads = []gomem.GCClock{
		cpu(gomem.GCClock{Now: at(0)}, 0, 0),
		cpu(gomem.GCClock{Now: at(110), Cycles: 0, Started: 1, Start: at(100)}, 0, 0),                // under way
		cpu(gomem.GCClock{Now: at(160), Cycles: 1, Started: 1, Start: at(100), End: at(150)}, 2, 10), // ended
		cpu(gomem.GCClock{Now: at(330), Cycles: 3, Started: 3, Start: at(300), End: at(320)}, 8, 30), // two more
		cpu(gomem.GCClock{Now: at(410), Cycles: 3, Started: 4, Start: at(400), End: at(320)}, 8, 30), // under way
	}
	c, err := newGCClock(s, 10*time.Millisecond, base, 0) // the engine clock starts at the first reading
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		c.poll()
	}
	cycles, polls, fails, _ := c.snapshot()
	type want struct {
		start, end        int64 // ms
		startRead, underW bool
		assist, total     int64 // ms
	}
	wants := []want{
		{100, 150, true, false, 2, 10},
		{160, 250, false, false, 3, 10}, // began after the poll at 160 ms
		{300, 320, true, false, 3, 10},
		{400, 410, true, true, 0, 0},
	}
	if polls != 4 || fails != 0 || len(cycles) != len(wants) {
		t.Fatalf("%d polls, %d failed, cycles %+v; want 4, 0 and %d cycles", polls, fails, cycles, len(wants))
	}
	near := func(a, b int64) bool { return a-b < ms/2 && b-a < ms/2 } // the ring's wall-clock round trip
	for i, w := range wants {
		g := cycles[i]
		if !near(g.start, w.start*ms) || !near(g.end, w.end*ms) || g.startRead != w.startRead || g.underW != w.underW ||
			g.assist != time.Duration(w.assist*ms) || g.total != time.Duration(w.total*ms) {
			t.Errorf("cycle %d: %+v, want %+v", i, g, w)
		}
	}
	if cycles[0].pause != 300*time.Microsecond {
		t.Errorf("pause %v, want the ring's 300µs", cycles[0].pause)
	}
}
