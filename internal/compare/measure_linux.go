package compare

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/window"
)

// cpuWindow measures t for one window.
func (r *runner) cpuWindow(ctx context.Context, t *target) (Window, error) {
	w := Window{Index: len(r.res.Windows), Side: t.idx, Kind: kindCPU, Life: max(t.life, 1), Values: map[string]float64{}}
	tree, err := r.tree(t)
	if err != nil {
		return w, err
	}
	step, err := r.startLoad(ctx, t, t.side.Name, r.cfg.Window)
	if err != nil {
		return w, err
	}
	var g0 *goruntime.Sample
	if t.gc != nil {
		g0 = readGC(ctx, t.gc)
	}
	// The generator's own CPU over the same interval, a covariate of the
	// sides' (loadCPUKey): this process's less the sampler's. The sampler
	// reads every thread of the side, so its cost follows the side's
	// thread count, which the covariate must not; locked to its thread for
	// the window, its cost is that thread's CPU clock.
	runtime.LockOSThread()
	gen0, own0 := processCPU(), threadCPU()
	m, err := r.measure(ctx, t, tree, r.cfg.Window)
	gen1, own1 := processCPU(), threadCPU()
	runtime.UnlockOSThread()
	gen1 -= own1 - own0
	if step != nil {
		res := <-step
		if err == nil {
			err = r.loadFailed(t, res)
		}
		if err == nil {
			r.applyLoad(&w, res, m)
		}
	}
	if err != nil {
		return w, err
	}
	w.Start, w.Seconds = m.start, m.seconds
	for k, v := range m.values {
		w.Values[k] = v
	}
	if step != nil && gen1 > gen0 {
		w.Values[loadCPUKey] = 100 * (gen1 - gen0).Seconds() / m.seconds
	}
	if g0 != nil {
		if g1 := readGC(ctx, t.gc); g1 != nil {
			gw := window.RuntimeBetween(g0, g1)
			if gw.Known.Has(goruntime.KnownGCCycles) {
				w.Values[metricGC.Name] = gw.GCCyclesPerSec
			}
			if !math.IsNaN(gw.GCCPUShare) {
				w.Values[metricGCShare.Name] = 100 * gw.GCCPUShare
			}
			if gw.Known.Has(goruntime.KnownGoroutines) {
				w.Values[metricGoroutines.Name] = float64(gw.Goroutines)
			}
			if gw.Known.Has(goruntime.KnownGoroutinesCreated) {
				w.Values[metricGoCreated.Name] = gw.CreatedPerSec
			}
		}
	}
	return w, nil
}

// measured is what one CPU window read from /proc.
type measured struct {
	start   time.Time
	seconds float64
	values  map[string]float64
}

// measure reads t's process tree every tick for d through a
// window.Builder, which subtracts the readings: CPU from the threads'
// schedstat run time (nanoseconds, merged by thread ID) plus the children
// reaped, split into user and system by the clock-tick counters; switches
// merged by thread (so threads that exit in the window keep what they
// did); and here the largest thread count and RSS of the tree seen.
func (r *runner) measure(ctx context.Context, t *target, tree []int, d time.Duration) (measured, error) {
	rd, err := proc.NewReader(proc.Options{Root: r.cfg.ProcRoot, PIDs: tree})
	if err != nil {
		return measured{}, fmt.Errorf("compare: watch side %s: %w", t.side.Name, err)
	}
	defer rd.Close()
	wb := window.NewBuilder(rd, window.Config{PIDs: tree, ProcRoot: r.cfg.ProcRoot, NoFacts: true, NoSeries: true})
	root := int32(tree[0])
	var threads, rss float64
	read := func() (*proc.Snapshot, error) {
		s, err := wb.Read()
		if err != nil {
			return nil, fmt.Errorf("compare: read side %s: %w", t.side.Name, err)
		}
		if s.Find(root) == nil {
			return nil, r.gone(t)
		}
		var th, mem float64
		for i := range s.Procs {
			th += float64(s.Procs[i].Threads)
			mem += float64(s.Procs[i].RSSBytes)
		}
		threads, rss = max(threads, th), max(rss, mem)
		return s, nil
	}
	first, err := read()
	if err != nil {
		return measured{}, err
	}
	start := first.Time
	tick := min(max(d/10, 20*time.Millisecond), 500*time.Millisecond)
	end := start.Add(d)
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for {
		next := min(time.Until(end), tick)
		timer.Reset(max(next, 0))
		var done <-chan struct{}
		if t.cmd != nil {
			done = t.done
		}
		select {
		case <-ctx.Done():
			return measured{}, fmt.Errorf("compare: interrupted: %w", ctx.Err())
		case <-done:
			return measured{}, r.exited(t)
		case <-timer.C:
		}
		if _, err := read(); err != nil {
			return measured{}, err
		}
		if !time.Now().Before(end) {
			break
		}
	}
	sec := wb.Latest().Time.Sub(start).Seconds()
	var cpuS, userS, sysS, vol, invol float64
	for _, w := range wb.Windows(0) {
		cpuS += w.CPUSec() + w.ChildUserSec + w.ChildSysSec
		userS += w.TickUserSec
		sysS += w.TickSysSec
		vol += float64(w.VolCtxsw)
		invol += float64(w.InvolCtxsw)
	}
	m := measured{start: start, seconds: sec, values: map[string]float64{}}
	m.values[metricCPU.Name] = 100 * cpuS / sec
	// The tick counters are coarse (the kernel charges a whole 10 ms tick
	// to user or system by where it lands) but their ratio splits the
	// precise total. Below 50 ticks in the window the split is mostly
	// rounding and is left out rather than guessed.
	if ticks := userS + sysS; ticks >= 50.0/proc.ClockTicks {
		m.values[metricUser.Name] = 100 * cpuS * userS / ticks / sec
		m.values[metricSys.Name] = 100 * cpuS * sysS / ticks / sec
	}
	m.values[metricWakeups.Name] = vol / sec
	m.values[metricInvol.Name] = invol / sec
	m.values[metricThreads.Name] = threads
	m.values[metricRSS.Name] = rss / (1 << 20)
	return m, nil
}
