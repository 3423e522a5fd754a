package web

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/window"
)

// watch is one process's history and its sampler. The sampler runs while
// at least one viewer holds the watch (and for Config.Linger after the last
// one leaves); the history outlives it, so a viewer who comes back, or the
// page of a process that exited, sees the past at once.
type watch struct {
	s     *Server
	pid   int
	start uint64 // the process's start time: a reused PID is another watch
	facts *goruntime.Facts

	life  // its mutex guards the rest
	ring  *ring
	marks marks // the sampler's windows at rows of ring, for the doctor

	comm, cmdline string
	exited        bool
	exitedAt      time.Time
	runtimeFrom   string // "agent", "pprof", ...: the Go runtime source, "" when none
	runtimeWhy    string // why there is none
	exactWant     bool   // a viewer asked for exact syscall counts
	exactOn       bool
	exactWhy      string // why exact counting is off or failed
	exactMech     string
	findings      findings
	samplerErr    string
}

// newWatch reads what is known of pid before any sampling.
func newWatch(s *Server, pid int, id proc.Identity, f *goruntime.Facts) *watch {
	slice := s.sliceRows()
	return &watch{
		s: s, pid: pid, start: id.StartTime, facts: f,
		ring:  newRing(s.capacity),
		marks: marks{dense: slice, sparse: slice},
		comm:  f.Comm,
	}
}

// acquire registers a viewer and starts the sampler if it is not running
// and the process has not exited.
func (w *watch) acquire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acquireLocked(!w.exited, &w.s.wg, w.run)
}

func (w *watch) release() { w.life.release(w.s.cfg.Linger) }

// sampler holds what the sampling goroutine keeps between ticks.
type sampler struct {
	r *proc.Reader
	// wb turns the readings into the process's window since the sampler
	// started; each point is window.Between the last two.
	wb         *window.Builder
	last       *window.Window
	rt         goruntime.Source
	rtNext     time.Time // when to look for a runtime source again
	rtHist     []*goruntime.Sample
	rtFirst    *goruntime.Sample
	exact      *syscalls.Exact
	exactLast  map[string]uint64
	exactTot   uint64
	exactBase  map[string]uint64 // counts when exact counting started
	exactT0    time.Time
	exactLastT time.Time
	// released is closed once the counters turned off last have been
	// released (the target pays for them until then); nil when none is
	// being released.
	released chan struct{}
	// quiet is what the process did in this run's rows with no exact
	// counters attached, summed: the doctor's CPU comes from it.
	quiet quietBooks
	ticks int
	run   int // the run's number in the watch's marks
}

// run samples the process every Config.Interval until stopc is closed or
// the process exits.
func (w *watch) run(stopc chan struct{}) {
	sm := &sampler{}
	defer sm.close()
	fail := func(err error) {
		w.mu.Lock()
		w.samplerErr = err.Error()
		w.running = false
		w.notifyLocked()
		w.mu.Unlock()
	}
	r, err := proc.NewReader(proc.Options{Root: w.s.cfg.ProcRoot, PIDs: []int{w.pid}, FullEvery: 5})
	if err != nil {
		fail(err)
		return
	}
	sm.r = r
	sm.wb = window.NewBuilder(r, window.Config{PIDs: []int{w.pid}, ProcRoot: w.s.cfg.ProcRoot, NoFacts: true, NoSeries: true})
	cur, err := sm.wb.Read()
	if err != nil {
		fail(err)
		return
	}
	sm.last = sm.wb.Window(w.pid)
	if p := cur.Find(int32(w.pid)); p == nil || p.StartTime != w.start || p.State == 'Z' {
		w.markExited(time.Now())
		return
	}
	w.mu.Lock()
	sm.run = w.marks.begin()
	if w.ring.seq > 0 {
		// A gap: the lines break here rather than join across the time
		// nobody watched.
		gap := blank(float64(cur.Time.UnixMilli()) / 1e3)
		w.ring.add(&gap)
		w.markLocked(sm, sm.last)
	}
	w.samplerErr = ""
	w.mu.Unlock()
	w.s.samplers.Add(1)
	defer w.s.samplers.Add(-1)

	tick := time.NewTicker(w.s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-stopc:
			return
		case <-tick.C:
		}
		if w.step(sm) {
			return
		}
	}
}

// step takes one reading and records it; it reports true when the
// process is gone.
func (w *watch) step(sm *sampler) (gone bool) {
	cur, err := sm.wb.Read()
	if err != nil {
		w.mu.Lock()
		w.samplerErr = err.Error()
		w.mu.Unlock()
		return false
	}
	p := cur.Find(int32(w.pid))
	if p == nil || p.StartTime != w.start || p.State == 'Z' {
		w.markExited(cur.Time)
		return true
	}
	now := cur.Time
	pt := blank(float64(now.UnixMilli()) / 1e3)
	win := sm.wb.Window(w.pid)
	if sm.last != nil && win != nil {
		d := window.Between(sm.last, win)
		if !sm.attached() {
			sm.quiet.add(d)
		}
		if sec := d.Seconds(); sec > 0 {
			pct := func(s float64) float64 { return 100 * s / sec }
			// The CPU is the window's (schedstat nanoseconds): a steady
			// 2% process draws at 2%, not at the 1, 2 or 3 whole clock
			// ticks that land in each second.
			pt[colUsr], pt[colSys] = pct(d.UserSec), pct(d.SysSec)
			pt[colCUsr], pt[colCSys] = pct(d.ChildUserSec), pct(d.ChildSysSec)
			pt[colWake], pt[colInvol] = float64(d.VolCtxsw)/sec, float64(d.InvolCtxsw)/sec
			pt[colRunQ] = pct(d.RunQueueSec)
			if d.IOCalls >= 0 {
				pt[colSysR] = float64(d.ReadCalls) / sec
				pt[colSysW] = float64(d.WriteCalls) / sec
			}
		}
	}
	sm.last = win
	pt[colThreads] = float64(p.Threads)
	pt[colRSS] = float64(p.RSSBytes)
	if p.Known&proc.KnownFDs != 0 {
		pt[colFDs] = float64(p.FDs)
	}
	if p.Known&proc.KnownFDLimit != 0 && p.FDLimit != proc.Unlimited {
		pt[colFDLimit] = float64(p.FDLimit)
	}
	if w.facts.GOMAXPROCS > 0 {
		pt[colMaxProcs] = float64(w.facts.GOMAXPROCS)
	}
	w.readRuntime(sm, &pt, now)
	w.readExact(sm, &pt, now)

	w.mu.Lock()
	w.comm, w.cmdline = p.Comm, p.Cmdline
	w.ring.add(&pt)
	w.markLocked(sm, win)
	w.mu.Unlock()
	sm.ticks++
	if sm.ticks%w.s.cfg.EvalEvery == 0 {
		w.evaluate(sm, false)
	}
	w.mu.Lock()
	w.notifyLocked()
	w.mu.Unlock()
	return false
}

// markExited records that the process went away; the history stays.
func (w *watch) markExited(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.exited {
		w.exited, w.exitedAt = true, t
	}
	w.running = false
	w.notifyLocked()
}

// readRuntime reads the Go runtime source, if the process has one, into pt.
func (w *watch) readRuntime(sm *sampler, pt *point, now time.Time) {
	if !w.facts.IsGo {
		return
	}
	if sm.rt == nil {
		if now.Before(sm.rtNext) {
			return
		}
		sm.rtNext = now.Add(30 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		src, _, err := goruntime.Connect(ctx, w.pid, goruntime.Options{ProcRoot: w.s.cfg.ProcRoot, Facts: w.facts})
		cancel()
		w.mu.Lock()
		if err != nil {
			// The error says why the process's memory could not be read
			// either (not Go, no permission, an unknown Go release).
			w.runtimeWhy = "no runtime source: " + err.Error() + " (run gosleuth as the program's user or root, or import github.com/gosleuth/gosleuth/agent in the program, to see its GC, heap, goroutines and scheduling latency)"
		} else {
			w.runtimeFrom, w.runtimeWhy = src.Kind(), ""
		}
		w.mu.Unlock()
		if err != nil {
			return
		}
		sm.rt = src
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	s, err := sm.rt.Read(ctx)
	cancel()
	if err != nil {
		sm.rt.Close()
		sm.rt = nil
		w.mu.Lock()
		w.runtimeFrom, w.runtimeWhy = "", "runtime source lost: "+err.Error()
		w.mu.Unlock()
		return
	}
	if sm.rtFirst == nil {
		sm.rtFirst = s
	}
	const keep = 64
	if len(sm.rtHist) == keep {
		copy(sm.rtHist, sm.rtHist[1:])
		sm.rtHist = sm.rtHist[:keep-1]
	}
	sm.rtHist = append(sm.rtHist, s)
	k := s.Known
	if k.Has(goruntime.KnownGoroutines) {
		pt[colGoroutines] = float64(s.Goroutines)
	}
	if k.Has(goruntime.KnownGOMAXPROCS) && s.GOMAXPROCS > 0 {
		pt[colMaxProcs] = float64(s.GOMAXPROCS)
	}
	if k.Has(goruntime.KnownHeapLive) {
		pt[colHeapLive] = float64(s.HeapLive)
	}
	if k.Has(goruntime.KnownHeapGoal) {
		pt[colHeapGoal] = float64(s.HeapGoal)
	}
	if k.Has(goruntime.KnownHeapAlloc) {
		pt[colHeapAlloc] = float64(s.HeapAlloc)
	}
	n := len(sm.rtHist)
	if n < 2 {
		return
	}
	prev := sm.rtHist[n-2]
	if k.Has(goruntime.KnownGCCycles) && prev.Known.Has(goruntime.KnownGCCycles) && s.Time.After(prev.Time) {
		pt[colGCCycles] = window.RuntimeBetween(prev, s).GCCyclesPerSec
	}
	// The GC's CPU share needs two completed cycles (the runtime's CPU
	// classes move only at the end of one): the shortest recent stretch
	// that holds two.
	for i := n - 2; i >= 0; i-- {
		a := sm.rtHist[i]
		if s.GCCycles >= a.GCCycles+2 {
			if win := window.RuntimeBetween(a, s); !math.IsNaN(win.GCCPUShare) {
				pt[colGCShare] = 100 * win.GCCPUShare
			}
			break
		}
	}
	if k.Has(goruntime.KnownSchedLatency) {
		a := sm.rtHist[max(0, n-6)]
		if win := window.RuntimeBetween(a, s); win.Known.Has(goruntime.KnownSchedLatency) && !math.IsNaN(win.SchedP99) {
			pt[colSchedP99] = 1e3 * win.SchedP99
		}
	}
}

func (sm *sampler) close() {
	if sm.r != nil {
		sm.r.Close()
	}
	if sm.rt != nil {
		sm.rt.Close()
	}
	if sm.exact != nil {
		// Releasing tracepoint events waits for the kernel's grace
		// periods: not on the way out of a request.
		go sm.exact.Close()
	}
}

// attached reports whether exact counters were attached to the process at
// any time since the last row: on, or turned off and not yet released.
func (sm *sampler) attached() bool {
	if sm.exact != nil {
		return true
	}
	if sm.released == nil {
		return false
	}
	select {
	case <-sm.released:
		// Released since the last row, or before it: this row is
		// counted as attached either way.
		sm.released = nil
	default:
	}
	return true
}

// quietBooks sums the CPU of rows with nothing of gosleuth attached.
type quietBooks struct {
	sec, user, sys float64
}

func (q *quietBooks) add(d *window.Window) {
	q.sec += d.Seconds()
	q.user += d.UserSec
	q.sys += d.SysSec
}

func (q quietBooks) minus(o quietBooks) quietBooks {
	return quietBooks{q.sec - o.sec, q.user - o.user, q.sys - o.sys}
}

func (q quietBooks) plus(o quietBooks) quietBooks {
	return quietBooks{q.sec + o.sec, q.user + o.user, q.sys + o.sys}
}

// setExact asks the sampler to start or stop exact syscall counting.
func (w *watch) setExact(on bool) error {
	if on && os.Geteuid() != 0 {
		return fmt.Errorf("exact syscall counts need root (per-task tracepoint counters): %w", proc.ErrPermission)
	}
	w.mu.Lock()
	w.exactWant = on
	if !on {
		w.exactWhy = ""
	}
	w.mu.Unlock()
	return nil
}
