package doctor

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Runtime classes of stack samples, as Stacks.Classes names them (the
// window layer's summary of the stack source's classes).
const (
	ClassGCBackground = window.ClassGCBackground
	ClassGCAssist     = window.ClassGCAssist
	ClassScheduler    = window.ClassScheduler
	ClassLock         = window.ClassLock
	ClassUserCode     = window.ClassUserCode
)

// Thresholds of the rules that need stacks or runtime metrics.
const (
	// Process must use this much CPU before shares of it matter.
	insideMinCores = 0.02
	// Share of samples in the scheduler, and the CPU that share must stand
	// for (an idle process is all scheduler, at no cost worth a finding).
	schedShareWarn = 0.30
	schedMinCores  = 0.03
	// Scheduler CPU per thread wake-up (seconds) above which the
	// scheduler's share is more than the cost of waking: each time a
	// thread sleeps and wakes, Go's scheduler runs once (findRunnable,
	// netpoll, park), a few microseconds; a server doing little work per
	// request shows that as a third of its CPU (the busy control: 7-9 us
	// per wake-up at 2,500-4,000 wake-ups a second), and no change to its
	// code removes it. Goroutines woken in herds or Ps spinning for work
	// cost the scheduler far more per thread wake-up (the herd patient:
	// 107-184 us).
	schedPerWakeWarn = 30e-6
	// Scheduling latency p99 (seconds) that means goroutines wait for a P.
	schedLatWarn = 0.005
	// Threads waiting for a CPU at least this fraction of the time they
	// run: the host is short of CPU for this process.
	starvedShare = 0.5
	// Share of samples in lock slow paths (and at least lockMinSamples of
	// them), and mutex wait seconds per second. Eight goroutines on one
	// mutex put 3.5-6% of their samples there whether the critical section
	// is short (a syscall, 5 us of spinning) or long (a SHA-256, a
	// formatted log line); a busy HTTP server's own locks stay under 1%.
	lockShareWarn  = 0.03
	lockMinSamples = 5
	// With futex handoffs counted (and no netpoll waits), a smaller share
	// of lock samples will do: the same eight goroutines gave 3.0% once.
	lockShareWeak = 0.01
	mutexWaitWarn = 0.1
	// Goroutines parking on sync mutexes (probes): a park is a goroutine
	// switch out and back in, and a futex wake of a thread when Ps are
	// idle, about 10 us of CPU with the waiter's latency on top. Contention
	// matters when it is both frequent, as often as the wake-ups the
	// idle-wakeups rule warns about, and dense in the work: a park for
	// every millisecond of CPU or less (the handoffs alone then cost ~1%
	// of it, and the waiting serialises the work). Lock-bound programs
	// park 2,400-190,000 times a second (4,000-200,000 per CPU-second);
	// HTTP servers at 1,000 req/s with a shared cache mutex, 0-1.
	lockParksWarn      = idleWakeupsWarn
	lockParksPerCPUSec = 1000.0
	goroutineLeakRise  = window.DumpGoroutineRise
	// A rising goroutine count is a leak when it would double within this
	// many seconds.
	goroutineDoublingSec = 600
	// One package taking this share of samples is a hotspot.
	hotspotShare = 0.30
	// One call from the program into a library under which this share of
	// all samples sits is a hot path (cumulative, not flat).
	hotCallShare = 0.25
	// A known slow path whose work is needed (reflection codecs, fmt) but
	// has a faster equivalent is a warning when it holds the majority of
	// the CPU: replacing it halves the cost (a JSON service's encoding/json
	// can hold more than half). Below that it is information.
	replaceableShareWarn = 0.5
	// The fewest samples under the call it is judged on (binomial noise on
	// 10 samples at 25% is about +-14 points).
	hotCallMinSamples = 10
)

func init() {
	register(&Rule{ID: "scheduler-overhead", Summary: "CPU spent in Go's scheduler, goroutine herds woken together", Missing: needStacksOrRuntime, Check: checkScheduler})
	register(&Rule{ID: "lock-contention", Summary: "goroutines queueing on mutexes", Missing: needStacksOrRuntime, Check: checkLocks})
	register(&Rule{ID: "goroutine-leak", Summary: "the goroutine count rising through the window", Missing: needRuntimeOrProbes, Check: checkGoroutineLeak})
	register(&Rule{ID: "cpu-hotspot", Summary: "one library call (cumulative) or one package (flat) taking a large share of CPU samples", Missing: needStacks, Check: checkHotspot})
}

func needStacks(w *Window) string {
	if w.Stacks != nil {
		return ""
	}
	return "needs stack samples: run as root (perf_event_open with kernel stacks)"
}

func needRuntimeOrProbes(w *Window) string {
	if !w.IsGo() || w.Runtime != nil {
		return ""
	}
	if _, ok := w.Probes.Rate(probeNewproc); ok {
		if _, ok := w.Probes.Rate(probeGoexit); ok {
			return ""
		}
	}
	return "needs Go runtime metrics (import github.com/gosleuth/gosleuth/agent, or pass --pprof-url / --metrics-url) or probes on runtime.newproc and runtime.goexit1 as root: RSS growth alone cannot tell leaked goroutines from a growing heap"
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

// wilsonLower is the lower bound of the Wilson score interval for k
// successes in n trials at z standard deviations.
func wilsonLower(k, n, z float64) float64 {
	if n <= 0 {
		return 0
	}
	p := k / n
	z2 := z * z
	return (p + z2/(2*n) - z*math.Sqrt(p*(1-p)/n+z2/(4*n*n))) / (1 + z2/n)
}

func checkScheduler(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	ev := EvidenceList{{"cpu_pct", pct(w.Cores()), "% of a core"}}
	var sources []Source
	hit := false
	ordinary := false // a high share that waking threads explains
	cores := 0.0
	code := codeAt(w, ClassScheduler, "wakes or parks goroutines")
	if s, ok := classShare(w, ClassScheduler); ok {
		cores = s * w.Cores()
		waker := 0.0
		for _, c := range code {
			waker += c.Share
		}
		ev = append(ev, Evidence{"scheduler_share_pct", pct(s), "% of samples"}, Evidence{"scheduler_cpu_pct", pct(cores), "% of a core"},
			Evidence{"under_program_code_pct", pct(waker), "% of samples"})
		wk := w.WakeupsPerSec()
		if wk > 0 {
			ev = append(ev, Evidence{"scheduler_us_per_wakeup", round(cores/wk*1e6, 1), "us"})
		}
		sources = append(sources, SourceStacks)
		// The share is read from a few dozen samples at low CPU: it must
		// clear the threshold with its uncertainty (the lower bound of a
		// 90% one-sided Wilson interval), or an I/O server's ordinary
		// netpoll and findRunnable time (10 of 30 samples) reads as a herd.
		n := float64(w.Stacks.Samples)
		high := wilsonLower(s*n, n, 1.28) >= schedShareWarn && cores >= schedMinCores
		// And it must cost more than waking threads costs anyway.
		hit = high && (wk == 0 || cores/wk >= schedPerWakeWarn)
		ordinary = high && !hit
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
	if r, ok := w.Syscalls.Rate("futex"); ok && (hit || ordinary) {
		ev = append(ev, Evidence{"futex_per_s", round(r, 0), "/s"})
	}
	if ordinary {
		return &Finding{
			Severity:   Info,
			Title:      "Go's scheduler takes much of the CPU, as the cost of waking threads",
			Observed:   fmt.Sprintf("Go's scheduler takes %.1f%% of a core, a few microseconds per thread wake-up", 100*cores),
			Evidence:   ev,
			Cause:      "Each time a thread sleeps and wakes (network readiness, timers, channel waits), Go's scheduler runs once to park it and find work; a program doing little work per wake-up, such as a server with light requests, shows that as a large share. Nothing points to herds of goroutines or spinning Ps.",
			Fix:        "Nothing to change for this alone; if the wake-ups themselves are the problem another finding says so (idle-wakeups, lock-contention, gomaxprocs-oversized).",
			Sources:    sources,
			Confidence: "medium",
			Cores:      cores,
		}
	}
	if !hit {
		return nil
	}
	return &Finding{
		Severity:   Warn,
		Code:       code,
		Title:      "much of the CPU goes to Go's scheduler",
		Observed:   fmt.Sprintf("Go's scheduler takes %.1f%% of a core", 100*cores),
		Evidence:   ev,
		Cause:      "Goroutines are woken in herds (a channel closed or a sync.Cond broadcast to thousands of waiters, one goroutine per descriptor or per connection polling together) or many Ps spin looking for work: the scheduler and futex wake-ups cost more than the work.",
		Fix:        "Wake only the goroutines that have work (a queue with a few workers instead of a broadcast), batch small tasks, and lower GOMAXPROCS for light periodic work.",
		Sources:    sources,
		Confidence: "medium",
		Cores:      cores,
	}
}

// checkLocks decides lock contention from the best source present: the
// runtime's mutex wait time (the agent or pprof); else, from outside, the
// probes' count of goroutines parking on sync mutexes; else the share of
// stack samples in lock slow paths, helped by the futex rate.
func checkLocks(w *Window, h *Host) *Finding {
	if !w.IsGo() {
		return nil
	}
	ev := EvidenceList{}
	var sources []Source
	stackHit := false
	if s, ok := classShare(w, ClassLock); ok && w.Cores() >= insideMinCores {
		ev = append(ev, Evidence{"lock_share_pct", pct(s), "% of samples"})
		if c := callers(w, ClassLock); c != "" {
			ev = append(ev, Evidence{"callers", c, ""})
		}
		sources = append(sources, SourceStacks)
		stackHit = s >= lockShareWarn && s*float64(w.Stacks.Samples) >= lockMinSamples
		// Fewer lock samples, but the syscalls show goroutines handed
		// over through futex at a high rate without the netpoller (no
		// timer, no I/O), and the scheduler's share is not what dominates
		// (a herd woken by a channel also takes a mutex on the way).
		if !stackHit && s >= lockShareWeak && s*float64(w.Stacks.Samples) >= minSiteSamples {
			futex, ok := w.Syscalls.Rate("futex")
			epoll, _ := w.Syscalls.Rate("epoll_pwait", "epoll_pwait2", "epoll_wait")
			if ok && futex >= idleWakeupsWarn && epoll*10 <= futex && w.Stacks.Classes[ClassScheduler] <= 3*s {
				stackHit = true
				ev = append(ev, Evidence{"futex_handoffs_per_s", round(futex, 0), "/s"}, Evidence{"netpoll_waits_per_s", round(epoll, 0), "/s"})
				if !slices.Contains(sources, SourceSyscalls) {
					sources = append(sources, SourceSyscalls)
				}
			}
		}
	}
	// Probes count the goroutines that actually park on a mutex: exact,
	// and blind to what only looks like a lock on CPU (a WaitGroup's
	// atomics, a runtime-internal lock), so they decide in place of the
	// stack samples.
	parks, probed := lockParks(w)
	hit := stackHit
	if probed {
		perCPU := math.Inf(1)
		if c := w.Cores(); c > 0 {
			perCPU = parks.PerSec / c
		}
		ev = append(ev, Evidence{"mutex_parks_per_s", round(parks.PerSec, 0), "/s"})
		if !math.IsInf(perCPU, 1) {
			ev = append(ev, Evidence{"mutex_parks_per_cpu_s", round(perCPU, 0), "per CPU-second"})
		}
		if parks.Readers+parks.Writers > 0 {
			ev = append(ev, Evidence{"rwmutex_reader_parks_per_s", round(parks.Readers, 0), "/s"}, Evidence{"rwmutex_writer_parks_per_s", round(parks.Writers, 0), "/s"})
		}
		if parks.Estimated {
			ev = append(ev, Evidence{"parks_counted", "partly in the probes' pre-flight (too hot to probe within the budget, even in bursts)", ""})
		}
		if parks.Duty > 0 {
			ev = append(ev, Evidence{"parks_sampled", fmt.Sprintf("in bursts attached %.0f%% of the window (too hot to probe throughout within the budget): the rate is an estimate", 100*parks.Duty), ""})
		}
		sources = append(sources, SourceProbes)
		hit = parks.PerSec >= lockParksWarn && perCPU >= lockParksPerCPUSec
	}
	if r := w.Runtime; r != nil && !math.IsNaN(r.MutexWaitPerSec) {
		ev = append(ev, Evidence{"mutex_wait_s_per_s", round(r.MutexWaitPerSec, 3), "s/s"})
		sources = append(sources, SourceRuntime)
		// The runtime measures the waiting itself; without probes the
		// stack samples may still add what it missed.
		hit = r.MutexWaitPerSec >= mutexWaitWarn || !probed && stackHit
	}
	if !hit {
		return nil
	}
	if r, ok := w.Syscalls.Rate("futex"); ok {
		ev = append(ev, Evidence{"futex_per_s", round(r, 0), "/s"})
		if !slices.Contains(sources, SourceSyscalls) {
			sources = append(sources, SourceSyscalls)
		}
	}
	code := parks.Code
	if parks.Sampled < 0.5 {
		// Most parks were counted without callers (too hot to probe even
		// in bursts): the stack samples name the rest.
		code = append(code, codeFrom(w, ClassLock, probeLocks, "contends for the lock")...)
	}
	sources = codeSources(sources, code)
	mutex := ""
	if parks.Mutex != 0 {
		mutex = fmt.Sprintf("the mutex at %#x", parks.Mutex)
		ev = append(ev, Evidence{"mutex", mutex, ""}, Evidence{"mutex_share_pct", pct(parks.MutexShare), "% of parks"})
	} else if _, fn, r := probeCode(w, probeLocks, 0, ""); fn != "" {
		ev = append(ev, Evidence{"slow_lock_calls_per_s", round(r, 0), "/s"})
		if a, ok := probeArg(w, fn); ok {
			mutex = a.Name
			if mutex == "" {
				mutex = fmt.Sprintf("the mutex at %#x", a.Value)
			}
			ev = append(ev, Evidence{"mutex", mutex, ""}, Evidence{"mutex_share_pct", pct(a.Share), "% of slow locks"})
		}
	}
	f := &Finding{
		Severity:   Warn,
		Title:      "goroutines queue on a mutex",
		Observed:   "goroutines queue on a mutex",
		Code:       code,
		Evidence:   ev,
		Cause:      "A lock is held across slow work or taken by every request (a global cache, logger, metrics client, rand source), so goroutines queue, park and wake through futex." + whichMutex(mutex),
		Fix:        "Hold the lock only around the shared state, shard it (per-CPU or per-key locks), use atomics or sync.Map for read-mostly data; confirm with the mutex profile (runtime.SetMutexProfileFraction).",
		Sources:    sources,
		Confidence: "medium",
	}
	if probed && (w.Runtime == nil || math.IsNaN(w.Runtime.MutexWaitPerSec)) {
		f.Observed = fmt.Sprintf("goroutines park on a mutex %.0f times a second, once per %.0f us of CPU", parks.PerSec, 1e6*w.Cores()/parks.PerSec)
		f.Cause += " Counted from outside with probes on the runtime's semaphore sleeps of sync.Mutex and RWMutex (WaitGroup and Cond waits are not counted)."
		f.Confidence = "high"
	}
	return f
}

func checkGoroutineLeak(w *Window, h *Host) *Finding {
	r := w.Runtime
	if !w.IsGo() {
		return nil
	}
	if r == nil || math.IsNaN(r.GoroutinesStart) || math.IsNaN(r.GoroutinesEnd) {
		return goroutineLeakProbed(w)
	}
	rise := r.GoroutinesEnd - r.GoroutinesStart
	// A rise of a few per cent of many goroutines is connection churn; a
	// leak doubles the count within minutes whatever its age (the patient,
	// 200 a second, went from 6,000 to 7,000 in 5 s half a minute after it
	// started: a rule asking 20% of the start missed it).
	if rise < goroutineLeakRise || r.Seconds <= 0 || rise/r.Seconds < r.GoroutinesStart/goroutineDoublingSec {
		return nil
	}
	code := codeFrom(w, "newproc", []string{probeNewproc}, "starts goroutines")
	ev := EvidenceList{{"goroutines_start", r.GoroutinesStart, ""}, {"goroutines_end", r.GoroutinesEnd, ""}, {"per_s", round(rise/r.Seconds, 1), "/s"}}
	if len(r.Groups) > 0 {
		// The goroutine dump names the go statement and the wait exactly.
		g := r.Groups[0]
		code = nil
		if g.CreatedBy.Func != "" {
			c := g.CreatedBy
			code = append(code, CodeRef{Func: c.Func, File: c.File, Line: c.Line, Role: fmt.Sprintf("starts the largest group (%d goroutines)", g.Count), Share: round(float64(g.Count)/r.GoroutinesEnd, 3), From: "goroutine dump"})
		}
		c := g.WaitsIn
		code = append(code, CodeRef{Func: c.Func, File: c.File, Line: c.Line, Role: "where they wait (" + g.State + ")", From: "goroutine dump"})
		ev = append(ev, Evidence{"largest_group", g.Count, ""}, Evidence{"largest_group_state", g.State, ""})
	}
	return &Finding{
		Severity:   Warn,
		Title:      fmt.Sprintf("goroutines rose from %.0f to %.0f", r.GoroutinesStart, r.GoroutinesEnd),
		Observed:   fmt.Sprintf("goroutines rose from %.0f to %.0f", r.GoroutinesStart, r.GoroutinesEnd),
		Code:       code,
		Evidence:   ev,
		Cause:      "Goroutines are started and never finish: blocked on a channel nobody sends to, a request without a timeout, a ticker loop without a stop.",
		Fix:        "Group the goroutine dump by stack (gosleuth inspect --pid PID) to find the largest group and its wait reason; give every goroutine a way out (context cancellation, timeouts, closing channels).",
		Sources:    codeSources([]Source{SourceRuntime}, code),
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
	if w.Cores() < insideMinCores || w.Stacks == nil || w.Stacks.Samples < minSamples {
		return nil
	}
	if f := hotCall(w); f != nil {
		return f
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

// hotCall reports the call from the program's code into a library under
// which the largest cumulative share of samples sits, when it reaches
// hotCallShare: a warning when the catalogue of known slow paths names it,
// information otherwise (a hot library call may be the program's job).
func hotCall(w *Window) *Finding {
	if f := roundTrip(w); f != nil {
		return f
	}
	// Work done per call that could be done once (compiling, parsing,
	// loading) is waste at any share: such a call warns from
	// onceShare, wherever it ranks (a small template parsed per request
	// held 11% of an unseen server's samples, under its own Execute).
	for _, c := range w.Stacks.LibCalls {
		if k := slowPathOf(c); k != nil && k.once && c.Share >= onceShare && c.Share*float64(w.Stacks.Samples) >= hotCallMinSamples {
			return hotCallFinding(w, c)
		}
	}
	if len(w.Stacks.LibCalls) == 0 || w.Stacks.LibCalls[0].Share < hotCallShare ||
		w.Stacks.LibCalls[0].Share*float64(w.Stacks.Samples) < hotCallMinSamples {
		return nil
	}
	return hotCallFinding(w, w.Stacks.LibCalls[0])
}

// onceShare is the share of samples from which a call whose work could be
// done once (slowPath.once) is reported: enough samples to tell it from
// noise, no more, since none of that work is needed.
const onceShare = 0.10

// hotCallFinding reports a hot library call c, matched against the
// catalogue.
func hotCallFinding(w *Window, c LibCall) *Finding {
	ev := EvidenceList{
		{"call", c.Callee, ""},
		{"called_from", CodeRef{Func: c.Caller.Func, File: c.Caller.File, Line: c.Caller.Line}.String(), ""},
		{"cumulative_share_pct", pct(c.Share), "% of samples"},
		{"cumulative_cpu_pct", pct(c.Share * w.Cores()), "% of a core"},
		{"leaves_under_it", joinShares(c.Leaves, 3), "(of the call's samples)"},
	}
	f := &Finding{
		Severity:   Info,
		Title:      fmt.Sprintf("%.0f%% of CPU is spent under one call to %s", 100*c.Share, c.Callee),
		Evidence:   ev,
		Cause:      fmt.Sprintf("%s calls %s, and %.0f%% of the process's CPU samples sit under that call (cumulative: the call and everything it calls).", c.Caller.Func, c.Callee, 100*c.Share),
		Fix:        "Call it less often (cache its result, hoist it out of the loop or the request path), or use a cheaper API for the same result.",
		Sources:    []Source{SourceStacks},
		Confidence: "medium",
		Cores:      c.Share * w.Cores(),
		Code:       []CodeRef{callRef(c)},
	}
	if k := slowPathOf(c); k != nil {
		if k.avoidable || c.Share >= replaceableShareWarn {
			f.Severity = Warn
		}
		f.Title = fmt.Sprintf("%s: %.0f%% of CPU under %s", k.name, 100*c.Share, c.Callee)
		f.Cause += " " + k.cause
		f.Fix = k.fix
		f.Evidence = append(f.Evidence, Evidence{"known_slow_path", k.name, ""}, Evidence{"identified_by", k.evidence, ""})
		f.Confidence = "high"
	}
	return f
}

// callRef names the program's code that makes library call c, from stack
// samples.
func callRef(c LibCall) CodeRef {
	return CodeRef{Func: c.Caller.Func, File: c.Caller.File, Line: c.Caller.Line, Role: "calls " + c.Callee, Share: round(c.Share, 3), From: "stack samples"}
}

// slowPath is an entry of the catalogue of known avoidable costs: what
// identifies it in a library call and its leaves, and the fix.
type slowPath struct {
	name, cause, fix string
	// callees are the library functions (exact names or, ending in '.',
	// package prefixes) whose call identifies the path.
	callees []string
	// leafShare, when set, also asks that share of the call's samples to
	// fall in leaves matching leafPrefix.
	leafPrefix string
	leafShare  float64
	// evidence says how it was identified, for the report.
	evidence string
	// avoidable is true when the work can be done once instead of per call
	// (compile, parse, set up, allocate): the finding is then a warning.
	// Otherwise (reflection, fmt) the work is needed and a faster way to
	// do it exists: worth knowing, not a fault.
	avoidable bool
	// once is true when the call's whole work is preparing something that
	// could be prepared once (compiling, parsing, loading): it warns from
	// onceShare, below a hot call's share.
	once bool
}

var slowPaths = []slowPath{
	{
		name:      "per-call regexp compilation",
		avoidable: true,
		once:      true,
		callees:   []string{"regexp.Compile", "regexp.MustCompile", "regexp.MatchString", "regexp.Match", "regexp.MatchReader", "regexp.CompilePOSIX", "regexp.MustCompilePOSIX"},
		cause:     "A regular expression is compiled on every call (regexp.MatchString and regexp.Match compile too): parsing and compiling costs far more than matching.",
		fix:       "Compile once: a package-level var re = regexp.MustCompile(...), then re.MatchString / re.FindStringSubmatch per call; for fixed strings use strings.Contains or strings.HasPrefix.",
		evidence:  "the hot call is a regexp compile",
	},
	{
		name:      "per-call template parsing",
		avoidable: true,
		once:      true,
		callees:   []string{"text/template.(*Template).Parse", "html/template.(*Template).Parse", "text/template.(*Template).ParseFiles", "html/template.(*Template).ParseFiles", "text/template.ParseFiles", "html/template.ParseFiles", "text/template.(*Template).ParseGlob", "html/template.(*Template).ParseGlob", "text/template.ParseGlob", "html/template.ParseGlob"},
		cause:     "A template is parsed on every call: parsing builds the whole tree again each time.",
		fix:       "Parse once at start-up (template.Must(template.New(...).Parse(...)) in a package-level var or at init) and only Execute per call.",
		evidence:  "the hot call is a template Parse",
	},
	{
		name:     "reflection-based encoding",
		callees:  []string{"encoding/json.", "encoding/xml.", "encoding/gob."},
		cause:    "encoding/json, xml and gob walk values by reflection on every call: type lookups, reflect.Value boxing and allocation per field cost more than the bytes.",
		fix:      "Decode or encode less (cache the result, decode only the fields needed with json.Decoder), or use generated code (easyjson, a protobuf codec) or encoding/json/v2 (GOEXPERIMENT=jsonv2).",
		evidence: "the hot call is an encoding/json, xml or gob codec",
	},
	{
		name:     "fmt on a hot path",
		callees:  []string{"fmt.Sprintf", "fmt.Sprint", "fmt.Sprintln", "fmt.Fprintf", "fmt.Fprint", "fmt.Fprintln", "fmt.Errorf", "fmt.Printf", "fmt.Appendf"},
		cause:    "fmt parses the format string and boxes every argument in an interface on each call.",
		fix:      "Build the string with strconv.Append* / strconv.Itoa and a strings.Builder or a reused []byte; keep fmt for errors and logs off the hot path.",
		evidence: "the hot call is a fmt print function",
	},
	{
		name:      "per-call compressor set-up",
		avoidable: true,
		callees:   []string{"compress/gzip.NewWriter", "compress/gzip.NewWriterLevel", "compress/flate.NewWriter", "compress/zlib.NewWriter", "compress/zlib.NewWriterLevel"},
		cause:     "A compressor is created per call: each allocates and clears its window and hash tables (about a megabyte for flate).",
		fix:       "Reuse writers (sync.Pool of *gzip.Writer with Reset(w)), or a faster implementation (github.com/klauspost/compress).",
		evidence:  "the hot call creates a compressor",
	},
	{
		name:       "per-call allocation of a large buffer",
		avoidable:  true,
		callees:    []string{"runtime.makeslice"},
		leafPrefix: "runtime.memclrNoHeapPointers",
		leafShare:  0.3,
		cause:      "A large buffer is allocated and zeroed on every call: the time goes to clearing memory (memclrNoHeapPointers) and to the GC that frees it.",
		fix:        "Reuse the buffer (keep it in the caller, or a sync.Pool of fixed-size buffers), or size it to what is needed.",
		evidence:   "the hot call is make([]T, n) and most of its samples clear memory",
	},
	{
		name:      "per-call certificate or key parsing",
		avoidable: true,
		once:      true,
		callees:   []string{"crypto/x509.ParseCertificate", "crypto/x509.ParseCertificates", "crypto/x509.(*CertPool).AppendCertsFromPEM", "crypto/x509.SystemCertPool", "crypto/tls.LoadX509KeyPair", "crypto/tls.X509KeyPair", "crypto/x509.ParsePKCS1PrivateKey", "crypto/x509.ParsePKCS8PrivateKey"},
		cause:     "Certificates or keys are parsed on every call.",
		fix:       "Parse once at start-up and keep the parsed value (a *x509.CertPool, a tls.Certificate).",
		evidence:  "the hot call parses certificates or keys",
	},
	{
		name:      "per-call time zone loading",
		avoidable: true,
		once:      true,
		callees:   []string{"time.LoadLocation"},
		cause:     "time.LoadLocation reads and parses the zoneinfo database on every call.",
		fix:       "Load the location once and keep the *time.Location.",
		evidence:  "the hot call is time.LoadLocation",
	},
}

// roundTripCodecs pairs an encoder with the decoder that undoes it: a
// function that encodes a value and decodes the bytes a few lines further
// on is copying (or converting) the value through a serialization.
var roundTripCodecs = []struct{ encode, decode []string }{
	{[]string{"encoding/json.Marshal", "encoding/json.MarshalIndent"}, []string{"encoding/json.Unmarshal"}},
	{[]string{"encoding/gob.(*Encoder).Encode", "encoding/gob.(*Encoder).EncodeValue"}, []string{"encoding/gob.(*Decoder).Decode", "encoding/gob.(*Decoder).DecodeValue"}},
	{[]string{"encoding/xml.Marshal"}, []string{"encoding/xml.Unmarshal"}},
}

// roundTripLines is how far below the encode the decode may be: the two
// calls of a copy sit together (b, _ := json.Marshal(v); json.Unmarshal(b,
// &out)), while a handler decodes its request before it encodes its reply,
// the other way round.
const roundTripLines = 5

// roundTrip finds a value copied through a serialization: one function
// encodes and, within roundTripLines below, decodes with the same codec,
// and the two calls together hold hotCallShare of the samples. The work
// is avoidable (copy the value by hand, or share it immutably), so it is a
// warning; each call alone may hold less than a hot call's share (a deep
// copy of a catalogue at 200 requests a second: Unmarshal 45%, Marshal
// 20%).
func roundTrip(w *Window) *Finding {
	var enc, dec *LibCall
	for _, codec := range roundTripCodecs {
		for i := range w.Stacks.LibCalls {
			e := &w.Stacks.LibCalls[i]
			if !slices.Contains(codec.encode, e.Callee) {
				continue
			}
			for j := range w.Stacks.LibCalls {
				d := &w.Stacks.LibCalls[j]
				if slices.Contains(codec.decode, d.Callee) && d.Caller.Func == e.Caller.Func &&
					d.Caller.Line > e.Caller.Line && d.Caller.Line <= e.Caller.Line+roundTripLines &&
					(enc == nil || e.Share+d.Share > enc.Share+dec.Share) {
					enc, dec = e, d
				}
			}
		}
	}
	if enc == nil {
		return nil
	}
	share := enc.Share + dec.Share
	if share < hotCallShare || share*float64(w.Stacks.Samples) < hotCallMinSamples {
		return nil
	}
	return &Finding{
		Severity: Warn,
		Title:    fmt.Sprintf("a value copied through %s and back: %.0f%% of CPU", enc.Callee, 100*share),
		Evidence: EvidenceList{
			{"encode", enc.Callee, ""}, {"decode", dec.Callee, ""},
			{"called_from", enc.Caller.Func, ""},
			{"cumulative_share_pct", pct(share), "% of samples"},
			{"cumulative_cpu_pct", pct(share * w.Cores()), "% of a core"},
			{"known_slow_path", "serialization round trip", ""},
			{"identified_by", fmt.Sprintf("%s encodes at line %d and decodes at line %d", enc.Caller.Func, enc.Caller.Line, dec.Caller.Line), ""},
		},
		Cause: fmt.Sprintf("%s encodes a value with %s and decodes the bytes straight back with %s: a deep copy (or type conversion) through a serialization, which walks every field by reflection twice and allocates the whole value again; %.0f%% of the process's CPU samples sit under the two calls.",
			enc.Caller.Func, enc.Callee, dec.Callee, 100*share),
		Fix:        "Copy the value directly (a Clone method, slices.Clone and maps.Clone for the parts that change), or share it read-only and copy on write; if callers must not mutate it, hand out an immutable view.",
		Sources:    []Source{SourceStacks},
		Confidence: "high",
		Cores:      share * w.Cores(),
		Code:       []CodeRef{callRef(*enc), callRef(*dec)},
	}
}

// slowPathOf returns the catalogue entry a library call matches, nil if
// none.
func slowPathOf(c LibCall) *slowPath {
	for i := range slowPaths {
		k := &slowPaths[i]
		hit := false
		for _, p := range k.callees {
			if c.Callee == p || strings.HasSuffix(p, ".") && strings.HasPrefix(c.Callee, p) {
				hit = true
				break
			}
		}
		if !hit {
			continue
		}
		if k.leafPrefix != "" && k.leafShare > 0 {
			under := 0.0
			for _, l := range c.Leaves {
				if strings.HasPrefix(l.Name, k.leafPrefix) {
					under += l.Share
				}
			}
			if under < k.leafShare {
				continue
			}
		}
		return k
	}
	return nil
}

// minSiteSamples is the fewest samples a code site or a kernel path is
// named from.
const minSiteSamples = 3

// codeAt names the code the stack samples found for key (a class, "timer",
// "exec", "newproc" or "syscall NAME"). The scheduler's and mark assist's
// sites need minSiteSamples samples (those classes are broad); one sample
// is enough under a specific call (a stack through a mutex's slow path,
// os.StartProcess or openat shows the call itself).
func codeAt(w *Window, key, role string) []CodeRef {
	if w.Stacks == nil || w.Stacks.Samples == 0 {
		return nil
	}
	need := 1.0
	switch key {
	case ClassScheduler, ClassGCAssist:
		need = minSiteSamples
	}
	// The samples are counted per function: one loop's lines share them.
	perFunc := map[string]float64{}
	for _, s := range w.Stacks.Sites[key] {
		perFunc[s.Func] += s.Share * float64(w.Stacks.Samples)
	}
	var out []CodeRef
	for _, s := range w.Stacks.Sites[key] {
		if perFunc[s.Func] < need-0.5 {
			continue
		}
		out = append(out, CodeRef{Func: s.Func, File: s.File, Line: s.Line, Role: role, Share: round(s.Share, 3), From: "stack samples"})
		if len(out) == 3 {
			break
		}
	}
	return out
}

// noCodeWhy says why a cause names no code.
func noCodeWhy(w *Window, what string) string {
	switch {
	case w.Stacks == nil:
		return "Without stack samples or probes the code responsible for " + what + " cannot be named."
	default:
		return fmt.Sprintf("The stack samples (%d) did not catch the code responsible for %s (a loop that does almost nothing is rarely on CPU); probes on the runtime's timer and sleep functions name it.", w.Stacks.Samples, what)
	}
}

func whichMutex(m string) string {
	if m == "" {
		return ""
	}
	return " The contended lock is " + m + "."
}
