package doctor

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/units"
	"github.com/gosleuth/gosleuth/internal/window"
)

// Thresholds of the GC rules. The GC's cost is weighed two ways at once:
// its share of the process's CPU (what removing it would give back) and
// that share in cores (a quiet process at 40% GC burns nothing worth a
// finding). Shares read from stack samples are taken at the lower bound of
// their 90% interval, so a share sitting near a threshold does not warn in
// one run and not the next: the case, 23% of 1.75 cores in GC
// (18.8% background, 4.1% assist), was a warning in one run and nothing in
// another when the thresholds sat at 25% and 5% on the point estimates.
const (
	// A quarter of a busy process's CPU in GC must not be missed: with
	// GOGC=100 a steady server spends 5-15% in GC, so from 15% (lower
	// bound) the GC takes more than the default trade of memory for CPU
	// gives, and the usual levers (less allocation, fewer pointers, a
	// higher GOGC or a memory limit set to what the host allows) pay.
	gcShareWarn = 0.15
	// ...and that share must be at least 5% of a core: a quiet process
	// at 40% GC burns nothing worth a finding, while a patient held to a
	// quarter of a core by a loaded host still spent a tenth in the GC.
	gcMinCores = 0.05
	// A setting that makes the GC run more often than GOGC=100 would (a
	// low GOGC, a heap held near its memory limit) is named from a lower
	// share and cost: the cause is the setting and the fix is known (a
	// patient at its memory limit, held to a tenth of a core by a loaded
	// host, still ran 44 cycles a second with a quarter of its CPU in GC).
	gcSettingShare = 0.10
	gcSettingCores = 0.02
	// GOGC below this is "set low" (the default is 100).
	gcLowGOGC = 100
	// The heap goal GOGC alone would set at or above this fraction of
	// the memory limit: the limit, not GOGC, decides when cycles run.
	gcLimitBound = 0.9
	// Mark assist: its share of the process's CPU (lower bound) and its
	// cost in cores. Assist stalls the allocating goroutine itself, so it
	// is latency even at a small share.
	assistShareWarn = 0.05
	assistMinCores  = 0.02
	// z of the one-sided 90% bound on sampled shares.
	shareZ = 1.28
)

func init() {
	register(&Rule{ID: "gc-pressure", Summary: "a large share of CPU in garbage collection, weighed in cores and against GOGC and the memory limit", Missing: needStacksOrRuntime, Check: checkGCPressure})
	register(&Rule{ID: "gc-assist", Summary: "goroutines drafted into GC mark assist (latency spikes)", Missing: needStacksOrRuntime, Check: checkGCAssist})
}

// gcCost is the GC's share of a process's CPU, from the best source.
type gcCost struct {
	// share and assist are fractions of the process's CPU; low and
	// assistLow the lower bounds of their 90% intervals (the shares
	// themselves when the source measures rather than samples).
	share, low, assist, assistLow float64
	from                          Source
	// how says where the shares came from, for the evidence.
	how string
}

// gcCostOf returns the GC's share of the process's CPU: from stack
// samples where there are enough (they sample CPU time itself); else from
// the runtime's CPU classes read through the agent or an endpoint; else
// from the runtime's books in memory (the GC's CPU between the last cycles
// before the window's two reads, against the process's CPU from /proc).
// The runtime counts the GC's time in wall time on its Ps, which a host
// short of CPU inflates (a patient's books gave 0.7 cores of GC where the
// process used 0.9 cores and its samples put 36% of them in the GC), so
// the samples come first. False when no source tells.
func gcCostOf(w *Window) (gcCost, bool) {
	if st := w.Stacks; st != nil && st.Samples >= minSamples {
		n := float64(st.Samples)
		bg, as := st.Classes[ClassGCBackground], st.Classes[ClassGCAssist]
		return gcCost{share: bg + as, low: wilsonLower((bg+as)*n, n, shareZ), assist: as, assistLow: wilsonLower(as*n, n, shareZ),
			from: SourceStacks, how: fmt.Sprintf("%d stack samples", st.Samples)}, true
	}
	if r := w.Runtime; r != nil && r.From != "memory" && (!math.IsNaN(r.GCCPUShare) || !math.IsNaN(r.AssistShare)) {
		// Either may be NaN (unknown): each rule checks the one it reads.
		return gcCost{share: r.GCCPUShare, low: r.GCCPUShare, assist: r.AssistShare, assistLow: r.AssistShare, from: SourceRuntime, how: "runtime CPU classes (" + r.From + ")"}, true
	}
	if b := books(w); b != nil && w.Cores() > 0 {
		if gc, as, ok := b.GCCores(); ok {
			share, assist := min(gc/w.Cores(), 1), min(as/w.Cores(), 1)
			return gcCost{share: share, low: share, assist: assist, assistLow: assist, from: SourceRuntime, how: "the runtime's books in memory (GC CPU against the process's CPU)"}, true
		}
	}
	return gcCost{}, false
}

// books returns the window's runtime books, nil when they were not read.
func books(w *Window) *window.Books {
	if w.Runtime == nil {
		return nil
	}
	return w.Runtime.Books
}

// gcSetting says which runtime setting makes the GC run more often than
// GOGC=100 would, from the books: "limit" when the heap goal GOGC alone
// would set reaches the memory limit, "gogc" when GOGC is set low, ""
// when neither (or the books were not read).
func gcSetting(b *window.Books) string {
	if b == nil {
		return ""
	}
	e := b.End
	if e.MemoryLimit > 0 && e.MemoryLimit != window.NoMemoryLimit && float64(e.HeapGoal) >= gcLimitBound*float64(e.MemoryLimit) {
		return "limit"
	}
	if e.GOGC > 0 && e.GOGC < gcLowGOGC {
		return "gogc"
	}
	return ""
}

// gcBooksEvidence adds what the books say about the GC's frequency and the
// heap against its goal and limit.
func gcBooksEvidence(ev EvidenceList, b *window.Books) EvidenceList {
	if b == nil {
		return ev
	}
	e := b.End
	ev = append(ev, Evidence{"gc_cycles_per_s", round(b.CyclesPerSec(), 2), "/s"})
	gogc := "off"
	if e.GOGC >= 0 {
		gogc = fmt.Sprint(e.GOGC)
	}
	ev = append(ev, Evidence{"gogc", gogc, ""}, Evidence{"heap_marked_mb", mb(e.HeapMarked), "MB"})
	if e.GOGC >= 0 {
		ev = append(ev, Evidence{"heap_goal_mb", mb(e.HeapGoal), "MB (GOGC's)"})
	}
	if e.MemoryLimit > 0 && e.MemoryLimit != window.NoMemoryLimit {
		ev = append(ev, Evidence{"memory_limit_mb", mb(uint64(e.MemoryLimit)), "MB"})
	}
	// How often cycles would come under GOGC alone: one per GOGC% of the
	// marked heap allocated.
	if alloc, ok := b.AllocPerSec(); ok && e.GOGC > 0 && e.HeapMarked > 0 {
		ev = append(ev, Evidence{"alloc_mb_per_s", round(alloc/1e6, 1), "MB/s"})
		if want := alloc / (float64(e.HeapMarked) * float64(e.GOGC) / 100); want > 0 && b.CyclesPerSec() > 0 {
			ev = append(ev, Evidence{"cycles_vs_gogc_alone", round(b.CyclesPerSec()/want, 1), "x"})
		}
	}
	return ev
}

func mb(b uint64) float64 { return round(float64(b)/1e6, 1) }

func checkGCPressure(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	c, ok := gcCostOf(w)
	if !ok || math.IsNaN(c.share) {
		return nil
	}
	cores := c.share * w.Cores()
	b := books(w)
	setting := gcSetting(b)
	hit := c.low >= gcShareWarn && c.low*w.Cores() >= gcMinCores
	if setting != "" && c.low >= gcSettingShare && c.low*w.Cores() >= gcSettingCores {
		hit = true
	}
	if !hit {
		return nil
	}
	ev := EvidenceList{{"gc_cpu_share_pct", pct(c.share), "%"}, {"gc_cpu_cores", round(cores, 2), "cores"}, {"cpu_pct", pct(w.Cores()), "% of a core"}, {"measured_from", c.how, ""}}
	if c.low != c.share {
		ev = append(ev, Evidence{"gc_cpu_share_low_pct", pct(c.low), "% (90% lower bound)"})
	}
	if c.assist > 0 { // false for NaN
		ev = append(ev, Evidence{"assist_share_pct", pct(c.assist), "%"})
	}
	ev = gcBooksEvidence(ev, b)
	if b == nil {
		if r := w.Runtime; r != nil && r.Seconds > 0 {
			ev = append(ev, Evidence{"gc_cycles_per_s", round(r.GCCycles/r.Seconds, 2), "/s"})
		}
	}
	cause := "The heap holds many pointers (large maps of pointers, caches of structs with strings) or allocation is high, so every cycle marks a lot and cycles come often."
	fix := "Cut allocation on the hot path (reuse buffers, sync.Pool), store cache entries without pointers (a pointer-free cache such as BigCache cut live objects from 2-3 M to 120 k), raise GOGC or set GOMEMLIMIT where memory allows."
	title := fmt.Sprintf("%.0f%% of CPU (%.2f cores) goes to garbage collection", 100*c.share, cores)
	switch setting {
	case "limit":
		e := b.End
		title = fmt.Sprintf("the heap sits at its memory limit: the GC runs %.0f times a second and takes %.0f%% of CPU", b.CyclesPerSec(), 100*c.share)
		goal := fmt.Sprintf("is below the heap goal GOGC=%d would set (%.0f MB for %.0f MB marked live)", e.GOGC, mb(e.HeapGoal), mb(e.HeapMarked))
		if e.GOGC < 0 {
			goal = fmt.Sprintf("alone decides when cycles run, GOGC being off (%.0f MB marked live)", mb(e.HeapMarked))
		}
		cause = fmt.Sprintf("The memory limit (GOMEMLIMIT or debug.SetMemoryLimit, %.0f MB) %s: the GC runs whenever the heap nears the limit, so with the live heap close to it cycles come back to back and each marks the whole live heap again.",
			mb(uint64(e.MemoryLimit)), goal)
		fix = "Give the limit room above the live heap (a limit is a ceiling for bursts, not a target: the live heap should stay well under it), or cut the live heap (a pointer-free cache, smaller retained buffers); if the host has no more memory, the process needs less live data."
	case "gogc":
		e := b.End
		title = fmt.Sprintf("GOGC=%d: the GC runs %.0f times a second and takes %.0f%% of CPU", e.GOGC, b.CyclesPerSec(), 100*c.share)
		cause = fmt.Sprintf("GOGC is set to %d: a cycle starts each time the heap grows by %d%% of the live heap (%.0f MB marked), %.0f times as often as the default GOGC=100 would run it for the same allocation.",
			e.GOGC, e.GOGC, mb(e.HeapMarked), 100/float64(e.GOGC))
		fix = "Raise GOGC (100 is the default) and bound memory with GOMEMLIMIT instead, which lets the GC run rarely while memory is plentiful; or allocate less on the hot path."
	}
	f := &Finding{
		Severity:   Warn,
		Title:      title,
		Observed:   fmt.Sprintf("%.0f%% of CPU in garbage collection", 100*c.share),
		Evidence:   ev,
		Cause:      cause,
		Fix:        fix,
		Sources:    []Source{c.from},
		Confidence: map[Source]string{SourceRuntime: "high", SourceStacks: "medium"}[c.from],
		Cores:      cores,
	}
	if b != nil && c.from != SourceRuntime {
		f.Sources = append(f.Sources, SourceRuntime)
	}
	// The code that allocates is where the GC's work comes from; mark
	// assist catches it in the act, the heap profile ranks it by rate.
	f.Code = codeFrom(w, ClassGCAssist, probeAssist, "allocates, and pays mark assist")
	f.Evidence, f.Code = allocSites(w, f.Evidence, f.Code)
	f.Sources = codeSources(f.Sources, f.Code)
	return f
}

// Bounds of the allocation sites a GC finding names.
const (
	// allocSitesNamed is how many of the top sites by bytes allocated
	// the code names.
	allocSitesNamed = 3
	// allocSiteMinShare is the share of the window's allocation a site
	// needs to be named: a site below it is not where the GC's work
	// comes from.
	allocSiteMinShare = 0.05
)

// allocSites adds to a GC finding the sites that allocated the most during
// the window, from the heap profile's counts between the window's reads:
// the rate (what the GC's frequency follows) in the evidence, and each
// site with its rate in the code, after the code the stacks named.
func allocSites(w *Window, ev EvidenceList, code []CodeRef) (EvidenceList, []CodeRef) {
	b := books(w)
	if b == nil || len(b.TopAlloc) == 0 || b.AllocSeconds <= 0 || b.AllocTotalBytes <= 0 {
		return ev, code
	}
	var parts []string
	for i, s := range b.TopAlloc {
		share := float64(s.AllocBytes) / float64(b.AllocTotalBytes)
		if i == allocSitesNamed || share < allocSiteMinShare {
			break
		}
		rate, objs := float64(s.AllocBytes)/b.AllocSeconds, float64(s.AllocObjects)/b.AllocSeconds
		parts = append(parts, fmt.Sprintf("%s %.1f MB/s (%.0f%%)", siteText(s.Own), rate/1e6, 100*share))
		ref := siteRef(s, fmt.Sprintf("allocates %.1f MB/s (%s objects/s), %.0f%% of what the program allocates", rate/1e6, units.Count(objs), 100*share))
		if !slices.ContainsFunc(code, func(c CodeRef) bool { return c.Func == ref.Func && c.Line == ref.Line && c.From == ref.From }) {
			code = append(code, ref)
		}
	}
	if len(parts) > 0 {
		ev = append(ev, Evidence{"top_alloc_sites", strings.Join(parts, ", "), fmt.Sprintf("(heap profile, over %.1f s)", b.AllocSeconds)})
	}
	return ev, code
}

func checkGCAssist(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Cores() < insideMinCores {
		return nil
	}
	c, ok := gcCostOf(w)
	if !ok || math.IsNaN(c.assist) || c.assistLow < assistShareWarn || c.assistLow*w.Cores() < assistMinCores {
		return nil
	}
	ev := EvidenceList{{"assist_share_pct", pct(c.assist), "%"}, {"assist_cpu_cores", round(c.assist*w.Cores(), 2), "cores"}, {"measured_from", c.how, ""}}
	if c.assistLow != c.assist {
		ev = append(ev, Evidence{"assist_share_low_pct", pct(c.assistLow), "% (90% lower bound)"})
	}
	if cl := callers(w, ClassGCAssist); cl != "" {
		ev = append(ev, Evidence{"allocating_callers", cl, ""})
	}
	f := &Finding{
		Severity:   Warn,
		Title:      fmt.Sprintf("%.0f%% of CPU is GC mark assist: goroutines stall to help the GC", 100*c.assist),
		Evidence:   ev,
		Cause:      "Allocation outruns the background mark workers, so the GC pacer makes allocating goroutines mark before they may allocate: requests stall (tens of ms), which shows as P99 spikes, often right after a cache expiry or traffic burst.",
		Fix:        "Smooth allocation bursts (stagger cache expiry, pre-size), allocate less per request, keep fewer pointers live; a higher GOGC or GOMEMLIMIT gives the pacer more room.",
		Sources:    []Source{c.from},
		Confidence: map[Source]string{SourceRuntime: "high", SourceStacks: "medium"}[c.from],
		Cores:      c.assist * w.Cores(),
	}
	f.Observed = fmt.Sprintf("%.0f%% of CPU in mark assist", 100*c.assist)
	f.Code = codeFrom(w, ClassGCAssist, probeAssist, "allocates, and pays mark assist")
	f.Evidence, f.Code = allocSites(w, f.Evidence, f.Code)
	f.Sources = codeSources(f.Sources, f.Code)
	return f
}
