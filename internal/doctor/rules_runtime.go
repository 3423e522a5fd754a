package doctor

import (
	"fmt"
	"math"
	"strings"
)

// Runtime classes of stack samples, as Stacks.Classes names them.
const (
	ClassGCBackground = "gc-background" // runtime.gcBgMarkWorker and sweeping
	ClassGCAssist     = "gc-assist"     // runtime.gcAssistAlloc on a goroutine's stack
	ClassScheduler    = "scheduler"     // schedule, findRunnable, stopm, park_m, mcall
	ClassLock         = "lock"          // sync.(*Mutex).lockSlow, runtime.lock2, semacquire
	ClassUserCode     = "user"          // the program's own code, outside the runtime and kernel
)

// Thresholds of the rules that need stacks or runtime metrics.
const (
	// Process must use this much CPU before shares of it matter.
	insideMinCores = 0.02
	// Share of samples in the scheduler, and the CPU that share must stand
	// for (an idle process is all scheduler, at no cost worth a finding).
	schedShareWarn = 0.30
	schedMinCores  = 0.03
	// Scheduling latency p99 (seconds) that means goroutines wait for a P.
	schedLatWarn = 0.005
	// Threads waiting for a CPU at least this fraction of the time they
	// run: the host is short of CPU for this process.
	starvedShare = 0.5
	// GC CPU share of the process's CPU (GOGC=100 steady state is ~5-15%).
	gcShareWarn = 0.25
	// Mark assist share of the process's CPU.
	assistShareWarn = 0.05
	// Share of samples in lock slow paths, and mutex wait seconds per second.
	lockShareWarn     = 0.05
	mutexWaitWarn     = 0.1
	goroutineLeakRise = 100
	// One package taking this share of samples is a hotspot.
	hotspotShare = 0.30
)

func init() {
	register(&Rule{ID: "scheduler-overhead", Summary: "CPU spent in Go's scheduler, goroutine herds woken together", Missing: needStacksOrRuntime, Check: checkScheduler})
	register(&Rule{ID: "gc-pressure", Summary: "a large share of CPU in garbage collection", Missing: needStacksOrRuntime, Check: checkGCPressure})
	register(&Rule{ID: "gc-assist", Summary: "goroutines drafted into GC mark assist (latency spikes)", Missing: needStacksOrRuntime, Check: checkGCAssist})
	register(&Rule{ID: "lock-contention", Summary: "goroutines queueing on mutexes", Missing: needStacksOrRuntime, Check: checkLocks})
	register(&Rule{ID: "goroutine-leak", Summary: "the goroutine count rising through the window", Missing: needRuntime, Check: checkGoroutineLeak})
	register(&Rule{ID: "cpu-hotspot", Summary: "one package taking a large share of CPU samples", Missing: needStacks, Check: checkHotspot})
}

func needStacks(w *Window) string {
	if w.Stacks != nil {
		return ""
	}
	return "needs stack samples: run as root (perf_event_open with kernel stacks)"
}

func needRuntime(w *Window) string {
	if !w.IsGo() || w.Runtime != nil {
		return ""
	}
	return "needs Go runtime metrics: import github.com/gosleuth/gosleuth/agent, or pass --pprof-url / --metrics-url"
}

func needStacksOrRuntime(w *Window) string {
	if !w.IsGo() || w.Stacks != nil || w.Runtime != nil {
		return ""
	}
	return "needs stack samples (run as root) or Go runtime metrics (import the agent or pass --pprof-url)"
}

// minSamples is the fewest stack samples a share is worth reading from.
const minSamples = 20

func classShare(w *Window, class string) (float64, bool) {
	if w.Stacks == nil || w.Stacks.Samples < minSamples {
		return 0, false
	}
	return w.Stacks.Classes[class], true
}

func callers(w *Window, class string) string {
	if w.Stacks == nil {
		return ""
	}
	return joinShares(w.Stacks.Callers[class], 3)
}

func checkScheduler(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	ev := EvidenceList{{"cpu_pct", pct(w.Cores()), "% of a core"}}
	var sources []Source
	hit := false
	cores := 0.0
	if s, ok := classShare(w, ClassScheduler); ok {
		cores = s * w.Cores()
		ev = append(ev, Evidence{"scheduler_share_pct", pct(s), "% of samples"}, Evidence{"scheduler_cpu_pct", pct(cores), "% of a core"})
		sources = append(sources, SourceStacks)
		hit = hit || s >= schedShareWarn && cores >= schedMinCores
	}
	if r := w.Runtime; r != nil && !math.IsNaN(r.SchedLatP99) {
		ev = append(ev, Evidence{"sched_latency_p99_ms", round(r.SchedLatP99*1e3, 2), "ms"})
		sources = append(sources, SourceRuntime)
		// Goroutines also wait when the host has no CPU for the process's
		// threads: that is the run queue's latency (/proc schedstat), not
		// the Go scheduler's.
		starved := w.RunQueueSec >= starvedShare*w.CPUSec()
		if starved {
			ev = append(ev, Evidence{"os_runqueue_pct", pct(perSec(w.RunQueueSec, w.Seconds())), "% of a core"})
		}
		hit = hit || r.SchedLatP99 >= schedLatWarn && !starved
	}
	if !hit {
		return nil
	}
	if r, ok := w.Syscalls.Rate("futex"); ok {
		ev = append(ev, Evidence{"futex_per_s", round(r, 0), "/s"})
	}
	return &Finding{
		Severity:   Warn,
		Title:      "much of the CPU goes to Go's scheduler",
		Evidence:   ev,
		Cause:      "Goroutines are woken in herds (a channel closed or a sync.Cond broadcast to thousands of waiters, one goroutine per descriptor or per connection polling together) or many Ps spin looking for work: the scheduler and futex wake-ups cost more than the work.",
		Fix:        "Wake only the goroutines that have work (a queue with a few workers instead of a broadcast), batch small tasks, and lower GOMAXPROCS for light periodic work.",
		Sources:    sources,
		Confidence: "medium",
		Cores:      cores,
	}
}

// gcShare returns a GC share of CPU from runtime metrics when the runtime
// gave it (fromRuntime picks the field), else the summed share of the stack
// classes, and which source it came from; NaN when neither is known.
func gcShare(w *Window, fromRuntime func(*Runtime) float64, classes ...string) (float64, Source) {
	if r := w.Runtime; r != nil && !math.IsNaN(fromRuntime(r)) {
		return fromRuntime(r), SourceRuntime
	}
	if w.Stacks == nil || w.Stacks.Samples < minSamples {
		return math.NaN(), ""
	}
	share := 0.0
	for _, c := range classes {
		share += w.Stacks.Classes[c]
	}
	return share, SourceStacks
}

// gcFinding is a GC finding whose cost is its share of the process's CPU.
func gcFinding(w *Window, share float64, from Source, title string, ev EvidenceList, cause, fix string) *Finding {
	return &Finding{
		Severity:   Warn,
		Title:      title,
		Evidence:   ev,
		Cause:      cause,
		Fix:        fix,
		Sources:    []Source{from},
		Confidence: map[Source]string{SourceRuntime: "high", SourceStacks: "medium"}[from],
		Cores:      share * w.Cores(),
	}
}

func checkGCPressure(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	share, from := gcShare(w, func(r *Runtime) float64 { return r.GCCPUShare }, ClassGCBackground, ClassGCAssist)
	if math.IsNaN(share) || share < gcShareWarn {
		return nil
	}
	ev := EvidenceList{{"gc_cpu_share_pct", pct(share), "%"}, {"cpu_pct", pct(w.Cores()), "% of a core"}}
	if r := w.Runtime; r != nil && r.Seconds > 0 {
		ev = append(ev, Evidence{"gc_cycles_per_s", round(r.GCCycles/r.Seconds, 2), "/s"})
		if !math.IsNaN(r.HeapObjects) {
			ev = append(ev, Evidence{"heap_objects", r.HeapObjects, ""})
		}
	}
	return gcFinding(w, share, from, fmt.Sprintf("%.0f%% of CPU goes to garbage collection", 100*share), ev,
		"The heap holds many pointers (large maps of pointers, caches of structs with strings) or allocation is high, so every cycle marks a lot and cycles come often.",
		"Cut allocation on the hot path (reuse buffers, sync.Pool), store cache entries without pointers (a pointer-free cache such as BigCache cut live objects from 2-3 M to 120 k), raise GOGC or set GOMEMLIMIT where memory allows.")
}

func checkGCAssist(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	share, from := gcShare(w, func(r *Runtime) float64 { return r.AssistShare }, ClassGCAssist)
	if math.IsNaN(share) || share < assistShareWarn {
		return nil
	}
	ev := EvidenceList{{"assist_share_pct", pct(share), "%"}}
	if c := callers(w, ClassGCAssist); c != "" {
		ev = append(ev, Evidence{"allocating_callers", c, ""})
	}
	return gcFinding(w, share, from, fmt.Sprintf("%.0f%% of CPU is GC mark assist: goroutines stall to help the GC", 100*share), ev,
		"Allocation outruns the background mark workers, so the GC pacer makes allocating goroutines mark before they may allocate: requests stall (tens of ms), which shows as P99 spikes, often right after a cache expiry or traffic burst.",
		"Smooth allocation bursts (stagger cache expiry, pre-size), allocate less per request, keep fewer pointers live; a higher GOGC or GOMEMLIMIT gives the pacer more room.")
}

func checkLocks(w *Window, h *Host) *Finding {
	if !w.IsGo() {
		return nil
	}
	ev := EvidenceList{}
	var sources []Source
	hit := false
	if s, ok := classShare(w, ClassLock); ok && w.Cores() >= insideMinCores {
		ev = append(ev, Evidence{"lock_share_pct", pct(s), "% of samples"})
		if c := callers(w, ClassLock); c != "" {
			ev = append(ev, Evidence{"callers", c, ""})
		}
		sources = append(sources, SourceStacks)
		hit = hit || s >= lockShareWarn
	}
	if r := w.Runtime; r != nil && !math.IsNaN(r.MutexWaitPerSec) {
		ev = append(ev, Evidence{"mutex_wait_s_per_s", round(r.MutexWaitPerSec, 3), "s/s"})
		sources = append(sources, SourceRuntime)
		hit = hit || r.MutexWaitPerSec >= mutexWaitWarn
	}
	if !hit {
		return nil
	}
	if r, ok := w.Syscalls.Rate("futex"); ok {
		ev = append(ev, Evidence{"futex_per_s", round(r, 0), "/s"})
		sources = append(sources, SourceSyscalls)
	}
	return &Finding{
		Severity:   Warn,
		Title:      "goroutines queue on a mutex",
		Evidence:   ev,
		Cause:      "A lock is held across slow work or taken by every request (a global cache, logger, metrics client, rand source), so goroutines queue, park and wake through futex.",
		Fix:        "Hold the lock only around the shared state, shard it (per-CPU or per-key locks), use atomics or sync.Map for read-mostly data; confirm with the mutex profile (runtime.SetMutexProfileFraction).",
		Sources:    sources,
		Confidence: "medium",
	}
}

func checkGoroutineLeak(w *Window, h *Host) *Finding {
	r := w.Runtime
	if !w.IsGo() || r == nil || math.IsNaN(r.GoroutinesStart) || math.IsNaN(r.GoroutinesEnd) {
		return nil
	}
	rise := r.GoroutinesEnd - r.GoroutinesStart
	if rise < goroutineLeakRise || rise < 0.2*r.GoroutinesStart {
		return nil
	}
	return &Finding{
		Severity:   Warn,
		Title:      fmt.Sprintf("goroutines rose from %.0f to %.0f", r.GoroutinesStart, r.GoroutinesEnd),
		Evidence:   EvidenceList{{"goroutines_start", r.GoroutinesStart, ""}, {"goroutines_end", r.GoroutinesEnd, ""}, {"per_s", round(rise/r.Seconds, 1), "/s"}},
		Cause:      "Goroutines are started and never finish: blocked on a channel nobody sends to, a request without a timeout, a ticker loop without a stop.",
		Fix:        "Group the goroutine dump by stack (gosleuth inspect --pid PID) to find the largest group and its wait reason; give every goroutine a way out (context cancellation, timeouts, closing channels).",
		Sources:    []Source{SourceRuntime},
		Confidence: "medium",
	}
}

// fasterPaths names well-known faster alternatives for packages that often
// dominate CPU profiles.
var fasterPaths = map[string]string{
	"encoding/json":  "decode less (cache decoded values, decode only needed fields with json.Decoder), or use a faster codec (encoding/json/v2 with GOEXPERIMENT=jsonv2, or a generated codec)",
	"regexp":         "compile once (package-level regexp.MustCompile), or use strings.Contains/Index for fixed patterns",
	"fmt":            "use strconv.Append* and strings.Builder on hot paths instead of fmt.Sprintf",
	"reflect":        "avoid reflection on hot paths (generated code, type switches)",
	"compress/flate": "lower the compression level or use a faster implementation (github.com/klauspost/compress)",
	"compress/gzip":  "lower the compression level or use a faster implementation (github.com/klauspost/compress)",
	"crypto/tls":     "reuse connections (keep-alive, session resumption) so handshakes are rare",
	"encoding/xml":   "decode less or stream with xml.Decoder.Token",
	"math/big":       "avoid big numbers on hot paths",
}

func checkHotspot(w *Window, h *Host) *Finding {
	if w.Cores() < insideMinCores || w.Stacks == nil || w.Stacks.Samples < minSamples || len(w.Stacks.Packages) == 0 {
		return nil
	}
	for _, p := range w.Stacks.Packages {
		if p.Name == "runtime" || p.Name == "main" || strings.HasPrefix(p.Name, "runtime/") || strings.HasPrefix(p.Name, "[") {
			// Runtime time is covered by the GC and scheduler rules, and
			// [kernel] by kernel-time; main is the program itself, which
			// its authors know better than a generic hint.
			continue
		}
		if p.Share < hotspotShare {
			return nil
		}
		fix := "Profile it (gosleuth profile --pid PID) and look at the cumulative view of that package's callers: call it less often, cache its results, or use a cheaper API."
		if alt, ok := fasterPaths[p.Name]; ok {
			fix = "Known faster paths for " + p.Name + ": " + alt + "."
		}
		return &Finding{
			Severity:   Info,
			Title:      fmt.Sprintf("%s takes %.0f%% of CPU samples", p.Name, 100*p.Share),
			Evidence:   EvidenceList{{"package", p.Name, ""}, {"share_pct", pct(p.Share), "% of samples"}, {"top_functions", joinShares(w.Stacks.Functions, 3), ""}},
			Cause:      fmt.Sprintf("One package, %s, does most of this process's work.", p.Name),
			Fix:        fix,
			Sources:    []Source{SourceStacks},
			Confidence: "high",
			Cores:      p.Share * w.Cores(),
		}
	}
	return nil
}
