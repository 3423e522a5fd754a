package web

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
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
	win, _ := w.windowLocked(sm, w.ring.oldest(), w.ring.seq)
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
	slice, _ := w.windowLocked(sm, w.ring.seq-9, w.ring.seq)
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
	win, _ = w.windowLocked(sm, w.ring.oldest(), w.ring.seq)
	rows := uint64(win.End.Sub(win.Start) / time.Second)
	if rows > capacity-1 || rows < capacity-10 || win.VolCtxsw != 3*rows {
		t.Errorf("after eviction: %d wake-ups over %d s, want 3 a second over %d-%d s", win.VolCtxsw, rows, capacity-10, capacity-1)
	}
}

// TestDoctorWindowQuietCPU: where exact syscall counting (whose
// tracepoints cost the process CPU) was on in part of the history, the
// doctor's window has the CPU of the rows without it, at their rate over
// the rows sampled, and a note says so; with counting on throughout the
// CPU is as counted and the note says it includes the counters' cost;
// with it never on, the window is as counted, without a note.
func TestDoctorWindowQuietCPU(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name     string
		attached func(row int) bool // rows 1-20
		wantUser float64            // CPU seconds over the 20 rows
		note     string
	}{
		{"never", func(int) bool { return false }, 20 * 0.02, ""},
		{"rows 6-15", func(r int) bool { return r > 5 && r <= 15 }, 20 * 0.02, "without exact syscall counting"},
		{"throughout", func(int) bool { return true }, 20 * 0.05, "includes exact syscall counting's cost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &watch{pid: 7, facts: &goruntime.Facts{}, ring: newRing(64), marks: marks{dense: 10, sparse: 10}}
			sm := &sampler{}
			sm.run = w.marks.begin()
			var user float64
			for r := 0; r <= 20; r++ {
				if r > 0 {
					// 2% of a core with nothing attached, 5% with the
					// counters.
					cpu := 0.02
					if tc.attached(r) {
						cpu = 0.05
					}
					prev := user
					user += cpu
					if !tc.attached(r) {
						sm.quiet.add(&window.Window{Start: t0.Add(time.Duration(r-1) * time.Second), End: t0.Add(time.Duration(r) * time.Second), UserSec: user - prev})
					}
				}
				pt := blank(float64(t0.Unix() + int64(r)))
				pt[colThreads] = 1
				w.ring.add(&pt)
				w.markLocked(sm, &window.Window{Start: t0, End: t0.Add(time.Duration(r) * time.Second), TickUserSec: user, IOCalls: -1})
			}
			win, note := w.windowLocked(sm, w.ring.oldest(), w.ring.seq)
			if d := win.UserSec - tc.wantUser; d > 1e-9 || d < -1e-9 {
				t.Errorf("CPU %.4f s over %.0f s, want %.4f", win.UserSec, win.Seconds(), tc.wantUser)
			}
			if (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want one saying %q", note, tc.note)
			}
		})
	}
}

// TestFindingsCPUWithoutExactCounting: on a 1 ms ticker whose history has
// exact syscall counting on for a part (per-task tracepoint counters,
// which about double its CPU), the doctor's window has the ticker's CPU
// without them (nearer the CPU measured with nothing attached than the
// counted rows' share would put it) and says so.
func TestFindingsCPUWithoutExactCounting(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.Tracefs, testenv.Perf)
	pid := testbin.Start(t, exec.Command(testbin.Build(t, "../window/testdata/burner")), testbin.Options{}).PID()
	r, err := proc.NewReader(proc.Options{PIDs: []int{pid}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var snap proc.Snapshot
	cpu := func() (float64, time.Time) { // the ticker's CPU seconds (schedstat)
		if err := r.Snapshot(&snap); err != nil || snap.Find(int32(pid)) == nil {
			t.Fatalf("read the ticker: %v", err)
		}
		return float64(snap.Find(int32(pid)).RunMerged) / 1e9, snap.Time
	}
	// since gives the CPU seconds and the seconds since a at t0.
	since := func(a float64, t0 time.Time) (float64, float64) {
		b, t1 := cpu()
		return b - a, t1.Sub(t0).Seconds()
	}
	s, err := New(Config{Interval: 200 * time.Millisecond, EvalEvery: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := s.watchFor(pid)
	if err != nil {
		t.Fatal(err)
	}
	w.acquire()
	defer w.release()
	a, t0 := cpu()
	time.Sleep(3 * time.Second)
	cpu0, sec0 := since(a, t0)
	if err := w.setExact(true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "exact counting", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.exactOn })
	a, t0 = cpu()
	time.Sleep(3 * time.Second)
	w.setExact(false)
	waitFor(t, "exact counting off", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return !w.exactOn })
	cpuN, secN := since(a, t0)
	counted := cpuN / secN
	time.Sleep(2 * time.Second) // the release (about 1.7 s)
	a, t0 = cpu()
	time.Sleep(3 * time.Second)
	cpu1, sec1 := since(a, t0)
	w.mu.Lock()
	win, note := w.windowLocked(&sampler{}, w.ring.oldest(), w.ring.seq)
	w.mu.Unlock()
	// The stretches before and after counting, which the rows without it
	// mostly cover.
	ref := (cpu0 + cpu1) / (sec0 + sec1)
	t.Logf("ticker %.4f and %.4f cores with nothing attached, %.4f while counted; the window says %.4f over %.1f s (measured over %.1f s): %s",
		cpu0/sec0, cpu1/sec1, counted, win.Cores(), win.Seconds(), win.QuietSec, note)
	if counted < 1.3*ref {
		t.Fatalf("exact counting raised the ticker's CPU only from %.4f to %.4f: nothing to correct", ref, counted)
	}
	if got := win.Cores(); got > ref+(counted-ref)/3 || got < ref/2.5 {
		t.Errorf("the window says %.4f cores, the ticker uses %.4f with nothing attached (%.4f counted)", got, ref, counted)
	}
	if !strings.Contains(note, "without exact syscall counting") {
		t.Errorf("note %q", note)
	}
}
