package doctor

import (
	"fmt"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Thresholds of the live-heap rule, read from the heap profile in the
// process's memory (in-use objects and bytes by allocation site, as of the
// last GC) and the GC's books.
const (
	// Millions of small objects from one site: the GC marks every one of
	// them every cycle, so a cache built of them makes each cycle cost in
	// proportion to its entries (seed 002: 2-3 M live objects in a
	// feature cache; a pointer-free cache brought them to 120 k).
	heapManyObjects = 1_000_000
	// One site holds at least this share of the live objects.
	heapSiteShare = 0.3
	// Small: at most this many bytes per object on average.
	heapSmallObject = 256
	// Pointer-rich: the scannable part of the marked heap (what the GC
	// must walk) at least this share. A pointer-free cache (an arena of
	// bytes indexed by a map of integers) has almost none.
	heapPointerShare = 0.5
	// The holder is a warning when the GC costs: its share of the CPU
	// (lower bound) and that in cores. Below, a large pointer-rich heap
	// that the GC rarely has to mark is information.
	heapGCShare = 0.10
	heapGCCores = 0.05
	// A live heap this large is worth naming its holders, as information.
	heapInfoBytes = 64 << 20
	// GC cycles a second from which the holder is not the GC's cost, GOGC
	// and the limit left alone: the GC's CPU is cycles a second times each
	// cycle's marking, and under GOGC a cycle comes each time the program
	// allocates the marked heap's size again. A program allocating its
	// live heap ten times a second or more marks a small heap over and
	// over: the cost comes from how much it allocates (gc-pressure names
	// the sites), and a pointer-free layout would cut each cycle's marking
	// but not the cycles. The caches the rule is for turn over slowly: 1.2
	// to 3.1 cycles a second on the patients (an LRU, an expiring cache, a
	// pointer cache) against 25-40 for a tree-building allocator with 1 M
	// small live nodes.
	heapCyclesAlloc = 10.0
)

func init() {
	register(&Rule{ID: "heap-holders", Summary: "who holds the live heap (top in-use sites), and millions of small pointer-rich objects from one site", Missing: needHeapProfile, Check: checkHeapHolders})
}

// needHeapProfile asks for the books and, where the heap is large enough
// to matter, their heap profile.
func needHeapProfile(w *Window) string {
	if why := needBooks(w); why != "" {
		return why
	}
	b := books(w)
	if b == nil || b.HeapProfile {
		return ""
	}
	if max(b.End.HeapMarked, b.End.HeapLive) >= heapInfoBytes {
		return "needs the heap profile, which this binary does not keep (" + b.HeapProfileWhy + "): importing net/http/pprof, even without serving it, keeps it"
	}
	return ""
}

func siteRef(s window.HeapSite, role string) CodeRef {
	o := s.Own
	c := CodeRef{Func: o.Func, File: o.File, Line: o.Line, Role: role, From: "heap profile"}
	if s.Site != o {
		at := s.Site
		c.alloc = &at
	}
	return c
}

// holdersText names the top sites by in-use bytes.
func holdersText(sites []window.HeapSite, total int64, n int) string {
	var parts []string
	for i, s := range sites {
		if i == n {
			break
		}
		share := 0.0
		if total > 0 {
			share = float64(s.InUseBytes) / float64(total)
		}
		parts = append(parts, fmt.Sprintf("%s %.0f MB (%.0f%%)", siteText(s.Own), mb(uint64(s.InUseBytes)), 100*share))
	}
	return strings.Join(parts, ", ")
}

func checkHeapHolders(w *Window, h *Host) *Finding {
	b := books(w)
	if !w.IsGo() || b == nil || !b.HeapProfile || len(b.TopBytes) == 0 {
		return nil
	}
	e := b.End
	live := max(e.HeapMarked, uint64(b.HeapInUseBytes))
	ev := EvidenceList{
		{"heap_marked_mb", mb(e.HeapMarked), "MB"},
		{"inuse_objects", b.HeapInUseObjects, "(heap profile)"},
		{"top_inuse_space", holdersText(b.TopBytes, b.HeapInUseBytes, 3), ""},
	}
	scanShare := 0.0
	if e.HeapMarked > 0 {
		scanShare = min(float64(e.ScanHeap)/float64(e.HeapMarked), 1)
		ev = append(ev, Evidence{"pointer_holding_share_pct", pct(scanShare), "% of the marked heap"})
	}
	var top window.HeapSite
	many := false
	if len(b.TopObjects) > 0 {
		top = b.TopObjects[0]
		share := 0.0
		if b.HeapInUseObjects > 0 {
			share = float64(top.InUseObjects) / float64(b.HeapInUseObjects)
		}
		avg := float64(top.InUseBytes) / float64(max(top.InUseObjects, 1))
		ev = append(ev, Evidence{"top_inuse_objects", fmt.Sprintf("%s: %d objects (%.0f%% of live objects), %.0f bytes each", siteText(top.Own), top.InUseObjects, 100*share, avg), ""})
		many = top.InUseObjects >= heapManyObjects && share >= heapSiteShare && avg <= heapSmallObject && scanShare >= heapPointerShare
	}
	if !many {
		if live < heapInfoBytes {
			return nil
		}
		var code []CodeRef
		for i, s := range b.TopBytes {
			if i == 3 {
				break
			}
			code = append(code, siteRef(s, fmt.Sprintf("allocated %.0f MB still live (%d objects)", mb(uint64(s.InUseBytes)), s.InUseObjects)))
		}
		return &Finding{
			Severity:   Info,
			Title:      fmt.Sprintf("the live heap (%.0f MB) is held by %s", mb(live), b.TopBytes[0].Own.Func),
			Evidence:   ev,
			Cause:      "These allocation sites hold most of the live heap (in-use space of the heap profile, as of the last GC).",
			Fix:        "Nothing to change if this is the data the program is meant to keep; if not, the code named keeps references longer than needed (a cache without a bound, slices of a large buffer, a map never pruned).",
			Sources:    []Source{SourceRuntime},
			Confidence: "high",
			Code:       code,
		}
	}
	c, costKnown := gcCostOf(w)
	sev := Info
	gcText := "The GC is cheap now (it rarely runs), so this costs memory more than CPU."
	if costKnown {
		ev = append(ev, Evidence{"gc_cpu_share_pct", pct(c.share), "%"}, Evidence{"gc_cpu_cores", round(c.share*w.Cores(), 2), "cores"})
		if c.low >= heapGCShare && c.low*w.Cores() >= heapGCCores {
			sev = Warn
			gcText = fmt.Sprintf("The GC takes %.0f%% of the CPU (%.2f cores), and every cycle marks these objects again.", 100*c.share, c.share*w.Cores())
			if cps := b.CyclesPerSec(); cps >= heapCyclesAlloc && gcSetting(b) == "" {
				sev = Info
				gcText = fmt.Sprintf("The GC takes %.0f%% of the CPU (%.2f cores), but it runs %.0f times a second: the program allocates its live heap's size again every %.0f ms, so the cost comes from allocation (see gc-pressure) more than from marking these objects.", 100*c.share, c.share*w.Cores(), cps, 1000/cps)
			}
		}
	}
	ev = append(ev, Evidence{"gc_cycles_per_s", round(b.CyclesPerSec(), 2), "/s"})
	switch gcSetting(b) {
	case "gogc":
		gcText += fmt.Sprintf(" GOGC=%d makes cycles come %.0f times as often as the default would, each marking them all.", e.GOGC, 100/float64(e.GOGC))
		ev = append(ev, Evidence{"gogc", e.GOGC, ""})
	case "limit":
		gcText += fmt.Sprintf(" The memory limit (%.0f MB) makes cycles come back to back, each marking them all.", mb(uint64(e.MemoryLimit)))
		ev = append(ev, Evidence{"memory_limit_mb", mb(uint64(e.MemoryLimit)), "MB"})
	}
	objs := top.InUseObjects
	code := []CodeRef{siteRef(top, fmt.Sprintf("allocates %d objects still live (%.0f MB)", objs, mb(uint64(top.InUseBytes))))}
	sources := []Source{SourceRuntime}
	if sev == Warn {
		// The code that allocates while the GC marks them pays mark
		// assist: where the allocation that drives the cycles is.
		assist := codeFrom(w, ClassGCAssist, probeAssist, "allocates, and pays mark assist")
		code = append(code, assist...)
		sources = codeSources(sources, assist)
	}
	return &Finding{
		Severity: sev,
		Title:    fmt.Sprintf("%.1f M small pointer-rich objects allocated at %s hold the live heap", float64(objs)/1e6, top.Own.Func),
		Observed: fmt.Sprintf("%.1f M live objects from one site", float64(objs)/1e6),
		Evidence: ev,
		Cause: fmt.Sprintf("%s allocated %d objects still live (%.0f MB, %.0f bytes each) and %.0f%% of the marked heap holds pointers: a cache or index built of many small structs, strings and pointers. The GC must visit every one of them in each cycle, so its mark work grows with the entries, not with the garbage. %s",
			siteText(top.Own), objs, mb(uint64(top.InUseBytes)), float64(top.InUseBytes)/float64(max(objs, 1)), 100*scanShare, gcText),
		Fix:        "Store the entries without pointers: serialise values into one large []byte (an arena) indexed by a map of integer keys to offsets (map[uint64]uint32 is never scanned), as BigCache and FreeCache do; or intern strings, replace *T fields by indices into slices of values, and keep keys as integers (hashes) instead of strings. Seed 002's cache went from 2-3 M live objects to 120 k that way.",
		Sources:    sources,
		Confidence: "high",
		Code:       code,
		Cores:      c.share * w.Cores(),
	}
}

// siteText writes a site as "func (file:line)".
func siteText(s window.Site) string {
	return CodeRef{Func: s.Func, File: s.File, Line: s.Line}.String()
}
