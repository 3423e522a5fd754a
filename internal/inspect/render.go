package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"
)

// WriteJSON writes the report as one indented JSON object. Figures unknown
// to the source, or not meaningful in the window, are null.
func (r *Report) WriteJSON(w io.Writer) error {
	out := struct {
		*Report
		Window any `json:"window,omitempty"`
	}{Report: r}
	if r.Window != nil {
		out.Window = windowJSON(r.Window)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

// windowJSON maps a window to JSON with null for unknown and NaN figures.
func windowJSON(w *goruntime.Window) map[string]any {
	m := map[string]any{
		"start": w.Start, "end": w.End, "seconds": w.Duration.Seconds(), "source": w.Source,
	}
	put := func(bit goruntime.Known, kv ...any) {
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
				v = nil
			}
			if bit != 0 && !w.Known.Has(bit) {
				v = nil
			}
			m[kv[i].(string)] = v
		}
	}
	put(goruntime.KnownGoroutines, "goroutines", w.Goroutines, "goroutines_delta", w.GoroutinesDelta)
	put(goruntime.KnownGoroutinesCreated, "goroutines_created_per_sec", w.CreatedPerSec)
	put(goruntime.KnownGoroutineStates, "goroutines_running", w.Running, "goroutines_runnable", w.Runnable,
		"goroutines_waiting", w.Waiting, "goroutines_not_in_go", w.NotInGo)
	put(goruntime.KnownThreads, "threads", w.Threads)
	put(goruntime.KnownGOMAXPROCS, "gomaxprocs", w.GOMAXPROCS)
	put(goruntime.KnownGCCycles, "gc_cycles", w.GCCycles, "gc_cycles_per_sec", w.GCCyclesPerSec)
	put(goruntime.KnownGCPauses, "gc_pause_p50_seconds", w.PauseP50, "gc_pause_p99_seconds", w.PauseP99,
		"gc_pause_max_seconds", w.PauseMax)
	put(goruntime.KnownCPUClasses, "gc_cpu_share", w.GCCPUShare, "assist_share", w.AssistShare, "gc_cpu_cores", w.GCCPUCores)
	put(goruntime.KnownGCCPUFraction, "gc_cpu_fraction_since_start", w.GCCPUFraction)
	put(goruntime.KnownHeapLive, "heap_live_bytes", w.HeapLive)
	put(goruntime.KnownHeapObjects, "heap_objects", w.HeapObjects)
	put(goruntime.KnownHeapGoal, "heap_goal_bytes", w.HeapGoal)
	put(goruntime.KnownHeapAlloc, "heap_alloc_bytes", w.HeapAlloc)
	put(goruntime.KnownScan, "scan_stack_bytes", w.ScanStack, "scan_heap_bytes", w.ScanHeap, "scan_globals_bytes", w.ScanGlobals)
	put(goruntime.KnownAllocs, "alloc_bytes_per_sec", w.AllocBytesPerSec, "alloc_objects_per_sec", w.AllocObjectsPerSec)
	put(goruntime.KnownSchedLatency, "sched_latency_p50_seconds", w.SchedP50, "sched_latency_p99_seconds", w.SchedP99,
		"sched_latency_samples", w.SchedSamples)
	put(goruntime.KnownMutexWait, "mutex_wait_per_sec", w.MutexWaitPerSec)
	if w.Known.Has(goruntime.KnownRecentPauses) {
		m["recent_gc_pauses"] = w.RecentPauses
	}
	if w.Known.Has(goruntime.KnownGODEBUG) {
		m["godebug_events"] = w.GODEBUG
		m["godebug_events_total"] = w.GODEBUGTotal
	}
	m["notes"] = w.Notes
	return m
}

// containerText names the process's container and its PID inside, for
// the process line: "  container podman 0123456789ab, PID 1 inside".
func containerText(f *goruntime.Facts) string {
	s := ""
	if f.Container != nil {
		s = "  container " + f.Container.String()
	}
	if f.NSPID != 0 && f.NSPID != f.PID {
		if s == "" {
			s = " "
		} else {
			s += ","
		}
		s += fmt.Sprintf(" PID %d in its namespace", f.NSPID)
	}
	return s
}

// WriteText writes the report for people.
func (r *Report) WriteText(out io.Writer) error {
	// Names, paths and goroutine labels are the target's: escaped.
	w := tabwriter.NewWriter(termsafe.NewWriter(out), 0, 4, 2, ' ', 0)
	f := r.Facts
	fmt.Fprintf(w, "process\t%d (%s)  %s%s\n", f.PID, f.Comm, f.Exe, containerText(f))
	if f.IsGo {
		mod := f.Module
		if mod == "" {
			mod = "unknown (not recorded)"
		}
		if f.ModuleVersion != "" {
			mod += " " + f.ModuleVersion
		}
		fmt.Fprintf(w, "Go\t%s  main %s  module %s\n", f.GoVersion, f.Path, mod)
		var bs []string
		bs = append(bs, "cgo="+onOff(f.CGO), "race="+onOff(f.Race))
		if f.ArchLevel != "" {
			bs = append(bs, f.ArchLevel)
		}
		if f.Experiment != "" {
			bs = append(bs, "GOEXPERIMENT="+f.Experiment)
		}
		if f.DefaultGODEBUG != "" {
			bs = append(bs, "DefaultGODEBUG="+f.DefaultGODEBUG)
		}
		if f.GoModBelow125 {
			bs = append(bs, "go.mod go line < 1.25")
		}
		fmt.Fprintf(w, "build\t%s\n", strings.Join(bs, "  "))
		if f.EnvGODEBUG != "" {
			fmt.Fprintf(w, "GODEBUG\t%s (environment)\n", f.EnvGODEBUG)
		}
		gm := fmt.Sprintf("%d  (%s)", f.GOMAXPROCS, f.GOMAXPROCSFrom)
		if f.GOMAXPROCS == 0 {
			gm = "unknown"
		}
		if r.Window != nil && r.Window.Known.Has(goruntime.KnownGOMAXPROCS) {
			live := r.Window.GOMAXPROCS
			if int(live) == f.GOMAXPROCS {
				gm += fmt.Sprintf("; the runtime agrees: %d", live)
			} else {
				gm += fmt.Sprintf("; the runtime says %d (set by the program, or changed since start)", live)
			}
		}
		fmt.Fprintf(w, "GOMAXPROCS\t%s\n", gm)
	} else if f.ExeUnreadable {
		fmt.Fprintf(w, "Go\tunknown: executable unreadable\n")
	} else {
		fmt.Fprintf(w, "Go\tnot a Go program\n")
	}
	cg := "no CPU cgroup found"
	if f.Cgroup.Version != 0 {
		lim := "no CPU limit"
		if f.Cgroup.Limit > 0 {
			lim = fmt.Sprintf("limit %.3g CPUs", f.Cgroup.Limit)
		}
		cg = fmt.Sprintf("cgroup v%d %s: %s; throttled %d of %d periods (%.3gs)", f.Cgroup.Version, f.Cgroup.Path,
			lim, f.Cgroup.Throttled, f.Cgroup.Periods, f.Cgroup.ThrottledSeconds)
	}
	fmt.Fprintf(w, "CPUs\t%d allowed (%s); %s\n", f.AllowedCPUs, f.AllowedCPUList, cg)
	if p := r.Proc; p != nil {
		fd := fmt.Sprintf("%d", p.FDs)
		if p.FDs < 0 {
			fd = "?"
		}
		if p.FDLimit > 0 {
			fd += fmt.Sprintf("/%d", p.FDLimit)
		}
		fmt.Fprintf(w, "/proc\tover %.1fs: CPU %.1f%% user + %.1f%% sys, RSS %s, %s, fds %s, wake-ups %.0f/s\n",
			p.Seconds, p.UserPct, p.SysPct, units.Bytes(p.RSSBytes), units.Plural(p.Threads, "thread"), fd, p.WakeupsPerSec)
	}
	if r.Window != nil {
		r.writeWindow(w)
	}
	if r.Books != nil {
		r.writeBooks(w)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if r.Dump != nil {
		writeDump(out, r.Dump)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	for _, n := range f.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	if r.Hint != "" {
		fmt.Fprintf(out, "\n%s\n", r.Hint)
	}
	return nil
}

func (r *Report) writeWindow(w io.Writer) {
	win := r.Window
	k := win.Known
	fr := ""
	if v, ok := r.Info["flightrecorder"]; ok {
		fr = " (FlightRecorder " + v + ")"
	}
	fmt.Fprintf(w, "\nruntime\tfrom %s at %s%s over %.1fs\n", r.Source, r.SourceAddr, fr, win.Duration.Seconds())
	var missing []string
	line := func(bit goruntime.Known, name, format string, args ...any) {
		if !k.Has(bit) {
			missing = append(missing, name)
			return
		}
		fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	if k.Has(goruntime.KnownGoroutines) {
		g := fmt.Sprintf("%d (%+d in window", win.Goroutines, win.GoroutinesDelta)
		if k.Has(goruntime.KnownGoroutineStates) && r.Source != "memory" {
			// runtime/metrics counts the runtime's own goroutines too
			// (GC workers, sweeper, scavenger, ...); the memory source
			// counts the program's, as NumGoroutine does.
			g = fmt.Sprintf("%d incl. the runtime's own (%+d in window", win.Goroutines, win.GoroutinesDelta)
		}
		if k.Has(goruntime.KnownGoroutinesCreated) {
			g += fmt.Sprintf(", %s created/s", num(win.CreatedPerSec))
		}
		g += ")"
		if k.Has(goruntime.KnownGoroutineStates) {
			g += fmt.Sprintf("  running %d, runnable %d, waiting %d, not in Go %d", win.Running, win.Runnable, win.Waiting, win.NotInGo)
		}
		fmt.Fprintf(w, "goroutines\t%s\n", g)
	} else {
		missing = append(missing, "goroutines")
	}
	if k.Has(goruntime.KnownThreads) || k.Has(goruntime.KnownGOMAXPROCS) {
		th := "? threads"
		if k.Has(goruntime.KnownThreads) {
			th = units.Plural(int(win.Threads), "thread")
			if r.Source != "agent" && !k.Has(goruntime.KnownGoroutineStates) {
				// The runtime counts the threads it created, some of
				// which may have exited: /proc says how many live.
				th = fmt.Sprintf("%d threads created since start", win.Threads)
				if r.Proc != nil {
					th += fmt.Sprintf(" (%d live)", r.Proc.Threads)
				}
			}
		}
		gm := "?"
		switch {
		case k.Has(goruntime.KnownGOMAXPROCS):
			gm = fmt.Sprint(win.GOMAXPROCS)
		case r.Facts.GOMAXPROCS > 0:
			gm = fmt.Sprintf("%d (discovered)", r.Facts.GOMAXPROCS)
		}
		fmt.Fprintf(w, "threads\t%s vs GOMAXPROCS %s vs %d allowed CPUs\n", th, gm, r.Facts.AllowedCPUs)
	}
	if k.Has(goruntime.KnownGCCycles) {
		g := fmt.Sprintf("%d cycles, %.2f/s", win.GCCycles, win.GCCyclesPerSec)
		if k.Has(goruntime.KnownGCPauses) && !math.IsNaN(win.PauseP50) {
			g += fmt.Sprintf("; pauses p50 %s, p99 %s, max %s", dur(win.PauseP50), dur(win.PauseP99), dur(win.PauseMax))
		} else if k.Has(goruntime.KnownRecentPauses) {
			var qs []string
			for _, q := range win.RecentPauses {
				qs = append(qs, fmt.Sprintf("q%g %s", q.Q, dur(q.Seconds)))
			}
			g += "; recent pauses (last 256, not this window): " + strings.Join(qs, ", ")
		}
		fmt.Fprintf(w, "GC\t%s\n", g)
	} else {
		missing = append(missing, "GC cycles")
	}
	switch {
	case k.Has(goruntime.KnownCPUClasses) && !math.IsNaN(win.GCCPUShare):
		fmt.Fprintf(w, "GC CPU\t%.1f%% of busy CPU (%.3f cores), mark assist %.1f%%\n",
			100*win.GCCPUShare, win.GCCPUCores, 100*win.AssistShare)
	case k.Has(goruntime.KnownCPUClasses):
		fmt.Fprintf(w, "GC CPU\tnot reported: fewer than 2 GC cycles ended in the window (see note)\n")
	case k.Has(goruntime.KnownGCCPUFraction):
		fmt.Fprintf(w, "GC CPU\t%.2f%% of available CPU since start (MemStats.GCCPUFraction; no window figure from this source)\n", 100*win.GCCPUFraction)
	default:
		missing = append(missing, "GC CPU")
	}
	var heap []string
	if k.Has(goruntime.KnownHeapLive) {
		heap = append(heap, "live "+units.Bytes(win.HeapLive))
	}
	if k.Has(goruntime.KnownHeapAlloc) {
		heap = append(heap, "in objects "+units.Bytes(win.HeapAlloc))
	}
	if k.Has(goruntime.KnownHeapObjects) {
		heap = append(heap, fmt.Sprintf("%s objects (incl. unswept)", num(float64(win.HeapObjects))))
	}
	if k.Has(goruntime.KnownHeapGoal) {
		heap = append(heap, "goal "+units.Bytes(win.HeapGoal))
	}
	if k.Has(goruntime.KnownAllocs) {
		heap = append(heap, fmt.Sprintf("alloc %s/s (%s objects/s)", units.Bytes(uint64(win.AllocBytesPerSec)), num(win.AllocObjectsPerSec)))
	}
	if len(heap) > 0 {
		fmt.Fprintf(w, "heap\t%s\n", strings.Join(heap, ", "))
	}
	line(goruntime.KnownScan, "scannable", "stacks %s, heap %s, globals %s", units.Bytes(win.ScanStack), units.Bytes(win.ScanHeap), units.Bytes(win.ScanGlobals))
	if k.Has(goruntime.KnownSchedLatency) {
		if win.SchedSamples == 0 {
			fmt.Fprintf(w, "sched latency\tno transition recorded in the window\n")
		} else {
			fmt.Fprintf(w, "sched latency\tp50 %s, p99 %s (%d samples; the runtime records ~1 transition in 8)\n",
				dur(win.SchedP50), dur(win.SchedP99), win.SchedSamples)
		}
	} else {
		missing = append(missing, "sched latency")
	}
	line(goruntime.KnownMutexWait, "mutex wait", "%.3g s/s", win.MutexWaitPerSec)
	if len(win.GODEBUGTotal) > 0 {
		var gs []string
		for _, name := range slices.Sorted(maps.Keys(win.GODEBUGTotal)) {
			gs = append(gs, fmt.Sprintf("%s %d in window (%d total)", name, win.GODEBUG[name], win.GODEBUGTotal[name]))
		}
		fmt.Fprintf(w, "GODEBUG events\t%s\n", strings.Join(gs, "; "))
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "not given\t%s (by the %s source)\n", strings.Join(missing, ", "), r.Source)
	}
	for _, n := range win.Notes {
		if n != goruntime.SchedSamplingNote {
			fmt.Fprintf(w, "note\t%s\n", n)
		}
	}
}

func writeDump(out io.Writer, d *goruntime.GoroutineDump) {
	fmt.Fprintf(out, "\ngoroutines by stack: %d goroutines (the program's; the runtime's own are not dumped), largest groups first\n", d.Total)
	for _, g := range d.Groups {
		st := g.State
		if len(g.States) > 1 {
			st += fmt.Sprintf(" (+%d other states)", len(g.States)-1)
		}
		wait := ""
		if g.MaxWaitMinutes > 0 {
			wait = fmt.Sprintf(", waiting %d-%d min", g.MinWaitMinutes, g.MaxWaitMinutes)
		}
		fmt.Fprintf(out, "%7d  %s%s\n", g.Count, st, wait)
		for i, fr := range g.Frames {
			if i == 5 {
				fmt.Fprintf(out, "         ... %d more frames\n", len(g.Frames)-5)
				break
			}
			fmt.Fprintf(out, "         %s\n", fr)
		}
		if g.CreatedBy != nil {
			fmt.Fprintf(out, "         created by %s\n", g.CreatedBy)
		}
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// dur formats seconds with a unit fit for its size.
func dur(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 1e-6:
		return fmt.Sprintf("%.0fns", s*1e9)
	case s < 1e-3:
		return fmt.Sprintf("%.3gµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	}
	return fmt.Sprintf("%.3gs", s)
}

// num formats a count compactly (1.2k, 3.4M).
func num(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3gG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	case v >= 100 || v == math.Trunc(v):
		// %.3g would print 5400.5 as 5.4e+03.
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
