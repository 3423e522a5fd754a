package web

import (
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/window"
)

// TestDoctorWindowFromMarks: the doctor's window over the history is the
// window layer's (window.Between of the sampler's windows at two rows,
// runs joined), exact where the charts' per-second rates would round, and
// the marks kept stay few however long the history grows.
func TestDoctorWindowFromMarks(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const capacity = 40
	w := &watch{
		pid: 7, facts: &goruntime.Facts{},
		ring:  newRing(capacity),
		marks: marks{dense: 10, sparse: 10},
	}
	sm := &sampler{}
	sec := 0
	// row adds one row at the next second with the sampler's cumulative
	// window (wake-ups and read calls since its run began).
	row := func(vol, reads uint64, gap bool) {
		sec++
		pt := blank(float64(sec) + float64(t0.Unix()))
		if !gap {
			pt[colThreads], pt[colRSS] = 3, 1<<20
		}
		w.ring.add(&pt)
		w.markLocked(sm, &window.Window{Start: t0, End: t0.Add(time.Duration(sec) * time.Second),
			VolCtxsw: vol, IOCalls: int64(reads), ReadCalls: reads})
	}
	// First run: rows 1-30, 7 wake-ups and 1 read a second, 0.5 s a row of
	// a CPU tick that charts would show as 0 or 1.
	sm.run = w.marks.begin()
	for i := 1; i <= 30; i++ {
		row(uint64(7*i), uint64(i), false)
	}
	// A gap row where the second run's builder read first, then 9 rows.
	sm.run = w.marks.begin()
	row(0, 0, true)
	for i := 1; i <= 9; i++ {
		row(uint64(3*i), 0, false)
	}
	win := w.windowLocked(sm, w.ring.oldest(), w.ring.seq)
	// The ring holds rows 1-40: run one from row 1 (29 intervals), run two
	// from its gap row (9 intervals).
	if win.VolCtxsw != 7*29+3*9 || win.IOCalls != 29 {
		t.Errorf("whole history: %d wake-ups and %d io calls, want %d and 29", win.VolCtxsw, win.IOCalls, 7*29+3*9)
	}
	if got := win.End.Sub(win.Start); got != 39*time.Second {
		t.Errorf("whole history spans %v, want 39s (the gap counts in time)", got)
	}
	if len(win.Series) != 39 || win.PID != 7 {
		t.Errorf("series of %d points (the gap row has none), pid %d: want 39 and 7", len(win.Series), win.PID)
	}
	// From the gap row, where the second run's builder read first.
	slice := w.windowLocked(sm, w.ring.seq-9, w.ring.seq)
	if slice.VolCtxsw != 3*9 {
		t.Errorf("last slice: %d wake-ups, want 27", slice.VolCtxsw)
	}
	// Far more rows than the ring holds: the oldest marks go, the window
	// starts at most sparse rows after the ring's oldest row.
	for i := 10; i <= 500; i++ {
		row(uint64(3*i), 0, false)
	}
	if n := len(w.marks.list); n > capacity/10+12 {
		t.Errorf("%d marks kept for a ring of %d rows", n, capacity)
	}
	win = w.windowLocked(sm, w.ring.oldest(), w.ring.seq)
	rows := uint64(win.End.Sub(win.Start) / time.Second)
	if rows > capacity-1 || rows < capacity-10 || win.VolCtxsw != 3*rows {
		t.Errorf("after eviction: %d wake-ups over %d s, want 3 a second over %d-%d s", win.VolCtxsw, rows, capacity-10, capacity-1)
	}
}
