package load

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/window"
)

// watcher samples the target process once per tick.
type watcher struct {
	pid int
	r   *proc.Reader
	// wb turns the readings into the target's window since the watch
	// began; a step or a tick is window.Between two of them, so switches of
	// threads that exit are kept (the window layer merges them by TID).
	wb *window.Builder
	gc goruntime.Source

	// The runtime source is read by its own goroutine, once per tick, so a
	// slow endpoint never delays a tick; read takes the latest reading.
	gcMu   sync.Mutex
	gcLast gcReading
	gcErr  error // the last read error, reported in the step's note
	stop   chan struct{}
	done   chan struct{}
}

// gcReading is the runtime's last sample with a GC cycle count.
type gcReading struct {
	ok     bool
	sample *goruntime.Sample
}

func newWatcher(root string, pid int, gc goruntime.Source, tick time.Duration) (*watcher, error) {
	r, err := proc.NewReader(proc.Options{Root: root, PIDs: []int{pid}})
	if err != nil {
		return nil, fmt.Errorf("watch pid %d: %w", pid, err)
	}
	w := &watcher{pid: pid, r: r, gc: gc, stop: make(chan struct{}), done: make(chan struct{}),
		wb: window.NewBuilder(r, window.Config{PIDs: []int{pid}, ProcRoot: root, NoFacts: true})}
	if !w.read().ok {
		r.Close()
		return nil, fmt.Errorf("watch pid %d: process not found", pid)
	}
	if gc == nil {
		close(w.done)
		return w, nil
	}
	w.readGC(tick) // a first reading before the first step
	go func() {
		defer close(w.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				w.readGC(tick)
			}
		}
	}()
	return w, nil
}

func (w *watcher) readGC(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), max(timeout, 2*time.Second))
	s, err := w.gc.Read(ctx)
	cancel()
	var g gcReading
	switch {
	case err != nil:
		err = fmt.Errorf("read runtime metrics from %s: %w", w.gc.Addr(), err)
	case !s.Known.Has(goruntime.KnownGCCycles):
		err = fmt.Errorf("the %s source gives no GC cycle count", w.gc.Kind())
	default:
		g = gcReading{ok: true, sample: s}
	}
	w.gcMu.Lock()
	if g.ok {
		w.gcLast = g
	} else {
		w.gcErr = err
	}
	w.gcMu.Unlock()
}

func (w *watcher) close() {
	close(w.stop)
	<-w.done
	w.r.Close()
}

// targetReading is the target's window from the watch's start to one
// reading, with the runtime's last sample at that time; what happened
// between two readings is window.Between and window.RuntimeBetween.
type targetReading struct {
	ok   bool
	w    *window.Window
	gcOK bool
	gc   *goruntime.Sample
}

func (w *watcher) read() targetReading {
	var r targetReading
	if _, err := w.wb.Read(); err != nil {
		return r
	}
	win := w.wb.Window(w.pid)
	if win == nil || win.Exited {
		return r
	}
	r = targetReading{ok: true, w: win}
	if w.gc != nil {
		w.gcMu.Lock()
		g := w.gcLast
		w.gcMu.Unlock()
		r.gcOK, r.gc = g.ok, g.sample
	}
	return r
}

// TargetTick is the watched process over one tick.
type TargetTick struct {
	CPUUser  float64 `json:"cpu_user_cores"`
	CPUSys   float64 `json:"cpu_sys_cores"`
	RSSBytes uint64  `json:"rss_bytes"`
	Threads  int32   `json:"threads"`
	// VolCtxsw and InvolCtxsw are context switches per second.
	VolCtxsw   float64 `json:"vol_ctxsw_per_s"`
	InvolCtxsw float64 `json:"invol_ctxsw_per_s"`
	GCCycles   *uint64 `json:"gc_cycles,omitempty"`
}

func tickTarget(a, b targetReading) *TargetTick {
	if !a.ok || !b.ok {
		return nil
	}
	d := window.Between(a.w, b.w)
	sec := d.Seconds()
	if sec <= 0 {
		return nil
	}
	last := b.w.Series[len(b.w.Series)-1]
	t := &TargetTick{
		CPUUser:  d.UserSec / sec,
		CPUSys:   d.SysSec / sec,
		RSSBytes: last.RSS, Threads: last.Threads,
		VolCtxsw:   float64(d.VolCtxsw) / sec,
		InvolCtxsw: float64(d.InvolCtxsw) / sec,
	}
	if a.gcOK && b.gcOK {
		n := window.RuntimeBetween(a.gc, b.gc).GCCycles
		t.GCCycles = &n
	}
	return t
}

// TargetStats is the watched process over a step's measured window.
type TargetStats struct {
	PID int `json:"pid"`
	// CPUUser and CPUSys are in cores (CPU-seconds per second).
	CPUUser float64 `json:"cpu_user_cores"`
	CPUSys  float64 `json:"cpu_sys_cores"`
	// RSSMaxBytes and MaxThreads are the highest values seen at a tick.
	RSSMaxBytes uint64  `json:"rss_max_bytes"`
	MaxThreads  int32   `json:"max_threads"`
	VolCtxsw    float64 `json:"vol_ctxsw_per_s"`
	InvolCtxsw  float64 `json:"invol_ctxsw_per_s"`
	// GCCycles counts the GC cycles completed in the window; GCPauses the
	// stop-the-world pauses, with their p99 and max in milliseconds (bucket
	// upper bounds of the runtime's histogram). Absent when the runtime was
	// not reachable; GCNote says why.
	GCCycles     *uint64  `json:"gc_cycles,omitempty"`
	GCPauses     *uint64  `json:"gc_pauses,omitempty"`
	GCPauseP99MS *float64 `json:"gc_pause_p99_ms,omitempty"`
	GCPauseMaxMS *float64 `json:"gc_pause_max_ms,omitempty"`
	GCSource     string   `json:"gc_source,omitempty"`
	GCNote       string   `json:"gc_note,omitempty"`
}

// targetAcc keeps the peaks and the last reading of a step.
type targetAcc struct {
	last    targetReading
	rss     uint64
	threads int32
}

func (t *targetAcc) add(r targetReading) {
	if !r.ok {
		return
	}
	t.last = r
	p := r.w.Series[len(r.w.Series)-1]
	t.rss = max(t.rss, p.RSS)
	t.threads = max(t.threads, p.Threads)
}

func (t *targetAcc) stats(first targetReading, w *watcher) *TargetStats {
	b := t.last
	if !first.ok || !b.ok {
		return nil
	}
	d := window.Between(first.w, b.w)
	sec := d.Seconds()
	if sec <= 0 {
		return nil
	}
	s := &TargetStats{PID: w.pid,
		CPUUser:     d.UserSec / sec,
		CPUSys:      d.SysSec / sec,
		RSSMaxBytes: t.rss, MaxThreads: t.threads,
		VolCtxsw:   float64(d.VolCtxsw) / sec,
		InvolCtxsw: float64(d.InvolCtxsw) / sec,
	}
	switch {
	case w.gc == nil:
		s.GCNote = "no runtime metrics source (agent, --pprof-url or --metrics-url)"
	case first.gcOK && b.gcOK:
		s.GCSource = w.gc.Kind()
		gw := window.RuntimeBetween(first.gc, b.gc)
		n := gw.GCCycles
		s.GCCycles = &n
		if d := gw.GCPauses; d != nil {
			np := d.Total()
			s.GCPauses = &np
			if np > 0 {
				p99, mx := d.Quantile(0.99)*1e3, d.Max()*1e3
				s.GCPauseP99MS, s.GCPauseMaxMS = &p99, &mx
			}
		}
	default:
		w.gcMu.Lock()
		if w.gcErr != nil {
			s.GCNote = w.gcErr.Error()
		} else {
			s.GCNote = "no runtime reading yet"
		}
		w.gcMu.Unlock()
	}
	return s
}

// ErrNoListener is returned by FindListener when no local process listens
// on the port.
var ErrNoListener = proc.ErrNoListener

// IsLocalHost reports whether host (a name or an address) is this machine.
func IsLocalHost(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// FindListener returns the PID of the process with a TCP socket listening
// on port, through the procfs mounted at root (/proc when empty): see
// proc.FS.ListenerPID.
func FindListener(root string, port int) (int, error) {
	return proc.NewFS(root).ListenerPID(port)
}
