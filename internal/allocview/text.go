package allocview

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"
)

// WriteJSON writes r as one JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a terminal: the top sites by bytes and by
// objects (per second over the window for Allocs, live for Heap), like
// pprof -top, each with the compiler's reason where the join ran.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d  %s  %s\n", r.PID, termsafe.String(r.Exe), r.GoVersion)
	gc := "the last completed GC"
	if !r.LastGC.IsZero() {
		gc = fmt.Sprintf("the last completed GC (cycle %d, %s before the reading)", r.GCCycle, r.Read.Sub(r.LastGC).Round(time.Millisecond))
	}
	if r.Sampled != nil {
		sampledHeader(&b, r)
	} else if r.Type == Allocs {
		fmt.Fprintf(&b, "allocated over %s: between the GCs that ended before the two readings of a %s window (%d GCs); the runtime counts as of %s\n",
			r.Window.Round(time.Millisecond), r.Asked, r.GCs, gc)
	} else {
		fmt.Fprintf(&b, "live heap as of %s\n", gc)
	}
	if r.Sampled == nil {
		fmt.Fprintf(&b, "from the runtime's heap profile in the process's memory: one allocation sampled per %s allocated, counts scaled as pprof does\n", units.Bytes(uint64(r.Rate)))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", termsafe.String(n))
	}
	secs := r.Window.Seconds()
	if r.Type == Allocs {
		if secs > 0 {
			fmt.Fprintf(&b, "total %s/s, %s objects/s\n", units.Bytes(uint64(float64(r.TotalBytes)/secs)), units.Count(float64(r.TotalObjects)/secs))
		}
	} else {
		fmt.Fprintf(&b, "total %s live in %s objects (sampled sites)\n", units.Bytes(uint64(r.TotalBytes)), units.Count(float64(r.TotalObjects)))
	}
	if e := r.Escape; e != nil {
		if e.Err != "" {
			fmt.Fprintf(&b, "escape analysis: %s\n", termsafe.String(e.Err))
		} else {
			fmt.Fprintf(&b, "escape analysis: %s (%s) with %s: %d findings; reasons at %d of the %d top sites in the module's code\n",
				termsafe.String(e.Module), termsafe.String(e.Dir), e.Toolchain, e.Findings, e.Joined, e.Sites)
		}
	}
	byBytes, byObjects := "bytes/s", "objects/s"
	if r.Type == Heap || secs <= 0 {
		byBytes, byObjects = "bytes", "objects"
		if r.Type == Heap {
			byBytes, byObjects = "live bytes", "live objects"
		}
	}
	writeTop(&b, r, "top sites by "+byBytes, r.Sites, func(s Site) int64 { return s.Bytes }, r.TotalBytes)
	if r.Sampled == nil {
		// Sampled sites rank the same by objects as by bytes: both are
		// shares of the same refills.
		writeTop(&b, r, "top sites by "+byObjects, r.ByObjects, func(s Site) int64 { return s.Objects }, r.TotalObjects)
	}
	writeReasons(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTop(b *strings.Builder, r *Report, title string, sites []Site, val func(Site) int64, total int64) {
	fmt.Fprintf(b, "\n%s\n", title)
	if len(sites) == 0 {
		b.WriteString("  (none)\n")
		return
	}
	secs := r.Window.Seconds()
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	unit, objects := "", "objects"
	if r.Type == Allocs && secs > 0 {
		unit = "/s"
	}
	if r.Sampled != nil {
		objects = "spans"
	}
	fmt.Fprintf(tw, "  bytes%s\tflat%%\tsum%%\t%s%s\tsite\n", unit, objects, unit)
	var sum int64
	for _, s := range sites {
		v := val(s)
		sum += v
		bs, os := units.Bytes(uint64(max(s.Bytes, 0))), units.Count(float64(s.Objects))
		if r.Type == Allocs && secs > 0 {
			bs, os = units.Bytes(uint64(max(s.BytesPerSec, 0)))+"/s", units.Count(s.ObjectsPerSec)+"/s"
		}
		if r.Sampled != nil {
			os = units.Count(s.SpansPerSec) + "/s"
		}
		fmt.Fprintf(tw, "  %s\t%.1f%%\t%.1f%%\t%s\t%s %s:%d\n", bs, pct(v, total), pct(sum, total), os,
			termsafe.String(s.Func), termsafe.String(s.File), s.Line)
	}
	tw.Flush()
}

// writeReasons writes the compiler's reasons at the top sites, by bytes
// then by objects, each site once.
func writeReasons(b *strings.Builder, r *Report) {
	if r.Escape == nil || r.Escape.Err != "" {
		return
	}
	b.WriteString("\nwhy they are on the heap (the compiler's escape analysis at each site's line in the module)\n")
	type key struct {
		fn, file string
		line     int
	}
	seen := map[key]bool{}
	for _, s := range append(append([]Site(nil), r.Sites...), r.ByObjects...) {
		j := s.Escape
		if j == nil || seen[key{s.Func, s.File, s.Line}] {
			continue
		}
		seen[key{s.Func, s.File, s.Line}] = true
		where := fmt.Sprintf("%s:%d", j.File, j.Line)
		if j.Via != "" {
			where += " (allocated in " + j.Via + ", called here)"
		}
		fmt.Fprintf(b, "  %s %s\n", termsafe.String(s.Func), termsafe.String(where))
		if len(j.Reasons) == 0 {
			b.WriteString("    the compiler reported no escape at this line\n")
			continue
		}
		for _, rs := range j.Reasons {
			fmt.Fprintf(b, "    %s [%s]\n      fix: %s\n", termsafe.String(rs.Reason), rs.Class, rs.Suggestion)
		}
	}
}

func pct(v, total int64) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(v) / float64(total)
}
