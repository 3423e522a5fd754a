package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// watcher samples the target process once per tick.
type watcher struct {
	pid  int
	r    *proc.Reader
	snap proc.Snapshot
	// prev is the reading before snap; rates merges the two by thread, and
	// vol and invol sum the merged switch counts since the first reading:
	// the process's own counters sum only live threads, so a thread that
	// exited took its switches with it and a step's delta came out short,
	// or 0 when more exited than ran.
	prev       proc.Snapshot
	rates      proc.Rates
	vol, invol uint64
	gc         goruntime.Source

	// The runtime source is read by its own goroutine, once per tick, so a
	// slow endpoint never delays a tick; read takes the latest reading.
	gcMu   sync.Mutex
	gcLast gcReading
	gcErr  error // the last read error, reported in the step's note
	stop   chan struct{}
	done   chan struct{}
}

type gcReading struct {
	ok     bool
	cycles uint64
	pauses *goruntime.Histogram // cumulative, seconds; nil when unknown
}

func newWatcher(pid int, gc goruntime.Source, tick time.Duration) (*watcher, error) {
	r, err := proc.NewReader(proc.Options{PIDs: []int{pid}})
	if err != nil {
		return nil, fmt.Errorf("watch pid %d: %w", pid, err)
	}
	w := &watcher{pid: pid, r: r, gc: gc, stop: make(chan struct{}), done: make(chan struct{})}
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
		g = gcReading{ok: true, cycles: s.GCCycles}
		if s.Known.Has(goruntime.KnownGCPauses) {
			g.pauses = s.GCPauses
		}
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

// targetReading is one reading of the target's cumulative counters.
type targetReading struct {
	ok           bool
	t            time.Time
	utime, stime uint64 // clock ticks
	rss          uint64
	threads      int32
	vol, invol   uint64
	gcOK         bool
	gcCycles     uint64
	gcPauses     *goruntime.Histogram // cumulative, seconds; nil when unknown
}

func (w *watcher) read() targetReading {
	var r targetReading
	w.prev, w.snap = w.snap, w.prev
	if err := w.r.Snapshot(&w.snap); err != nil {
		w.prev, w.snap = w.snap, w.prev
		return r
	}
	p := w.snap.Find(int32(w.pid))
	if p == nil {
		return r
	}
	if len(w.prev.Procs) > 0 {
		w.rates.Compute(&w.prev, &w.snap)
		sec := w.rates.Interval.Seconds()
		for i := range w.rates.Procs {
			if pr := &w.rates.Procs[i]; pr.Proc == p && !pr.New {
				w.vol += uint64(math.Round(pr.VolPerSec * sec))
				w.invol += uint64(math.Round(pr.InvolPerSec * sec))
			}
		}
	}
	r = targetReading{ok: true, t: w.snap.Time, utime: p.UTime, stime: p.STime, rss: p.RSSBytes,
		threads: p.Threads, vol: w.vol, invol: w.invol}
	if w.gc != nil {
		w.gcMu.Lock()
		g := w.gcLast
		w.gcMu.Unlock()
		r.gcOK, r.gcCycles, r.gcPauses = g.ok, g.cycles, g.pauses
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

func sub(a, b uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}

func tickTarget(a, b targetReading) *TargetTick {
	if !a.ok || !b.ok {
		return nil
	}
	sec := b.t.Sub(a.t).Seconds()
	if sec <= 0 {
		return nil
	}
	t := &TargetTick{
		CPUUser:  float64(sub(a.utime, b.utime)) / proc.ClockTicks / sec,
		CPUSys:   float64(sub(a.stime, b.stime)) / proc.ClockTicks / sec,
		RSSBytes: b.rss, Threads: b.threads,
		VolCtxsw:   float64(sub(a.vol, b.vol)) / sec,
		InvolCtxsw: float64(sub(a.invol, b.invol)) / sec,
	}
	if a.gcOK && b.gcOK {
		n := sub(a.gcCycles, b.gcCycles)
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
	t.rss = max(t.rss, r.rss)
	t.threads = max(t.threads, r.threads)
}

func (t *targetAcc) stats(first targetReading, w *watcher) *TargetStats {
	b := t.last
	if !first.ok || !b.ok {
		return nil
	}
	sec := b.t.Sub(first.t).Seconds()
	if sec <= 0 {
		return nil
	}
	s := &TargetStats{PID: w.pid,
		CPUUser:     float64(sub(first.utime, b.utime)) / proc.ClockTicks / sec,
		CPUSys:      float64(sub(first.stime, b.stime)) / proc.ClockTicks / sec,
		RSSMaxBytes: t.rss, MaxThreads: t.threads,
		VolCtxsw:   float64(sub(first.vol, b.vol)) / sec,
		InvolCtxsw: float64(sub(first.invol, b.invol)) / sec,
	}
	switch {
	case w.gc == nil:
		s.GCNote = "no runtime metrics source (agent, --pprof or --metrics)"
	case first.gcOK && b.gcOK:
		s.GCSource = w.gc.Kind()
		n := sub(first.gcCycles, b.gcCycles)
		s.GCCycles = &n
		if first.gcPauses != nil && b.gcPauses != nil {
			d := b.gcPauses.Sub(first.gcPauses)
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
// on the port (or the URL's host is not local).
var ErrNoListener = errors.New("no local process listens on the port")

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
// on port, found through /proc/net/tcp{,6} (socket inode) and the
// processes' fd links. root is the procfs mount ("/proc").
func FindListener(root string, port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		for _, ino := range listenInodes(b, port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("port %d: %w", port, ErrNoListener)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0, fmt.Errorf("find listener on port %d: %w", port, err)
	}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(root, ent.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("port %d (socket owner not visible): %w", port, ErrNoListener)
}

// listenInodes parses a /proc/net/tcp{,6} table and returns the inodes of
// the sockets in state LISTEN (0A) on port.
func listenInodes(b []byte, port int) []string {
	var out []string
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], want) {
			continue
		}
		out = append(out, f[9])
	}
	return out
}
