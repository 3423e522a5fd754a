// Package allocview is the view behind "gosleuth profile --type heap|allocs":
// the allocation profile of a running Go program read from the runtime's
// own heap-profile buckets in its memory (internal/gomem), as of now (what
// is live) or over a window (what was allocated during it, the difference
// of two readings), ranked by site, written as pprof or text or JSON, and
// joined with the compiler's escape analysis of the program's source
// (internal/escape): each top site with the reason its value is on the
// heap and the change that usually avoids it.
//
// The runtime publishes its counts at the end of each GC cycle, so both
// views are as of the last completed GC, and a window is the span between
// the last GCs before its two readings.
package allocview

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/escape"
	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// The profile types.
const (
	Heap   = "heap"   // live objects as of the last GC (inuse_*)
	Allocs = "allocs" // what was allocated over a window (alloc_*)
)

// Options say what to read.
type Options struct {
	PID int
	FS  proc.FS
	// Type is Heap or Allocs.
	Type string
	// Duration is the window of an Allocs profile.
	Duration time.Duration
	// Top is how many sites the report keeps (0: 20).
	Top int
	// Src is a directory of the program's module source for the escape
	// join; "auto" finds it from the binary's file paths where they exist
	// on disk; "" joins nothing.
	Src string
	// GoVersion overrides the toolchain the escape analysis runs
	// (default: the release the binary was built with).
	GoVersion string
}

// Report is an allocation profile ranked by site.
type Report struct {
	PID       int    `json:"pid"`
	Exe       string `json:"exe"`
	GoVersion string `json:"go_version"`
	Type      string `json:"type"`
	// Rate is runtime.MemProfileRate: one allocation sampled per Rate
	// bytes on average; the counts are scaled estimates, as pprof's.
	Rate int64 `json:"rate"`
	// Read is when the (last) reading was taken; LastGC when the GC whose
	// end the counts are as of ended.
	Read   time.Time `json:"read"`
	LastGC time.Time `json:"last_gc"`
	// Window is the span an Allocs profile covers (between the last GCs
	// before its two readings), GCs the cycles in it; Asked the window
	// asked for.
	Window  time.Duration `json:"window_ns,omitempty"`
	Asked   time.Duration `json:"asked_ns,omitempty"`
	GCs     uint32        `json:"gcs,omitempty"`
	GCCycle uint32        `json:"gc_cycle"`
	// Totals over every site (not only the top ones).
	TotalObjects int64 `json:"total_objects"`
	TotalBytes   int64 `json:"total_bytes"`
	// Sites are the top sites, by bytes (alloc bytes for Allocs, in-use
	// bytes for Heap); ByObjects the top sites by objects.
	Sites     []Site `json:"sites"`
	ByObjects []Site `json:"by_objects"`
	// Escape says how the escape join went.
	Escape *EscapeRun `json:"escape,omitempty"`
	// Sampled says how the profile was sampled from outside, where the
	// linker turned memory profiling off; nil where it was read from the
	// runtime's own book.
	Sampled *Sampling `json:"sampled,omitempty"`
	Notes   []string  `json:"notes,omitempty"`

	prof *profile.Profile
}

// Site is one allocation site: the innermost frame outside the runtime.
type Site struct {
	Func  string        `json:"func"`
	File  string        `json:"file"`
	Line  int           `json:"line"`
	Stack []gomem.Frame `json:"stack"`
	// Objects and Bytes are allocated during the window (Allocs) or live
	// (Heap), scaled estimates.
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	// ObjectsPerSec and BytesPerSec are the rates over the window (Allocs).
	ObjectsPerSec float64 `json:"objects_per_sec,omitempty"`
	BytesPerSec   float64 `json:"bytes_per_sec,omitempty"`
	// SpansPerSec is, in a sampled profile, the span refills (and large
	// objects) a second charged to the site.
	SpansPerSec float64 `json:"spans_per_sec,omitempty"`
	// Escape is the compiler's reason, where the join ran.
	Escape *Join `json:"escape,omitempty"`
}

// Pprof is the profile in pprof's model, for -o.
func (r *Report) Pprof() *profile.Profile { return r.prof }

// Collect reads the allocation profile of opts.PID. Where the linker
// turned memory profiling off it fails with an error wrapping
// gomem.ErrMemProfilingOff.
func Collect(ctx context.Context, opts Options) (*Report, error) {
	if opts.Type != Heap && opts.Type != Allocs {
		return nil, fmt.Errorf("allocation profile: type %q is not %s or %s", opts.Type, Heap, Allocs)
	}
	if opts.Top <= 0 {
		opts.Top = 20
	}
	p, err := gomem.Open(opts.FS, opts.PID)
	if err != nil {
		return nil, fmt.Errorf("read the runtime of process %d: %w", opts.PID, err)
	}
	defer p.Close()
	r := &Report{PID: opts.PID, GoVersion: p.GoVersion, Type: opts.Type, Asked: opts.Duration}
	r.Exe, _ = opts.FS.Exe(opts.PID)
	h, st, err := reading(p)
	if errors.Is(err, gomem.ErrMemProfilingOff) {
		if opts.Type == Heap {
			return nil, fmt.Errorf("%w; what is live cannot be sampled from outside (--type allocs samples the allocator)", err)
		}
		if serr := sampleAllocs(ctx, opts, p, r); serr != nil {
			return nil, fmt.Errorf("%w; sampling the allocator from outside instead failed: %w", err, serr)
		}
		if opts.Src != "" {
			r.join(ctx, opts, nil)
		}
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	var view *gomem.HeapProfile
	if opts.Type == Heap {
		view = h
		r.LastGC = st.LastGC
		r.GCCycle = h.GCCycles
	} else {
		t := time.NewTimer(opts.Duration)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		h2, st2, err := reading(p)
		if err != nil {
			return nil, err
		}
		view = diff(h, h2, r)
		r.GCs = h2.GCCycles - h.GCCycles
		r.GCCycle = h2.GCCycles
		r.LastGC = st2.LastGC
		r.Window = st2.LastGC.Sub(st.LastGC)
		if st.LastGC.IsZero() || st2.LastGC.IsZero() {
			r.Window = h2.Time.Sub(h.Time)
			r.Notes = append(r.Notes, "the time of the last GC could not be read: rates are over the time between the two readings")
		}
		if r.GCs == 0 {
			r.Window = 0
			r.Notes = append(r.Notes, fmt.Sprintf("no GC completed during the %s window: the runtime publishes its allocation counts at the end of each GC, so none can be told apart yet (take a longer --duration)", opts.Duration))
		}
		h = h2
	}
	r.Rate = h.Rate
	r.Read = h.Time
	r.Notes = append(r.Notes, h.Notes...)
	if h.Rate == 0 {
		return nil, fmt.Errorf("allocation profile of process %d: the program set runtime.MemProfileRate to 0, so the runtime samples no allocation", opts.PID)
	}
	sites := p.Sites(view)
	r.ranks(sites, opts.Top)
	r.prof = p.Pprof(view)
	r.finishPprof()
	if opts.Src != "" {
		r.join(ctx, opts, sites)
	}
	return r, nil
}

// reading reads the heap profile and the GC state around it.
func reading(p *gomem.Process) (*gomem.HeapProfile, *gomem.Stats, error) {
	h, err := p.HeapProfile()
	if err != nil {
		if errors.Is(err, gomem.ErrMemProfilingOff) {
			return nil, nil, fmt.Errorf("allocation profile of process %d: %w", p.PID, err)
		}
		return nil, nil, fmt.Errorf("read the heap profile of process %d: %w", p.PID, err)
	}
	st, err := p.Stats()
	if err != nil {
		st = &gomem.Stats{}
	}
	return h, st, nil
}

// diff returns what b holds beyond a: the allocations and frees counted
// between the two readings, with a note where a read was torn.
func diff(a, b *gomem.HeapProfile, r *Report) *gomem.HeapProfile {
	d, shrank := b.Since(a)
	if shrank > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d sites counted less at the second reading than at the first (a torn read): left out", shrank))
	}
	return d
}

// ranks fills the report's totals and top lists from the sites.
func (r *Report) ranks(sites []gomem.Site, top int) {
	secs := r.Window.Seconds()
	all := make([]Site, 0, len(sites))
	for _, s := range sites {
		v := Site{Func: s.Func, File: s.File, Line: s.Line, Stack: s.Stack}
		if r.Type == Heap {
			v.Objects, v.Bytes = s.InUseObjects, s.InUseBytes
		} else {
			v.Objects, v.Bytes = s.AllocObjects, s.AllocBytes
			if secs > 0 {
				v.ObjectsPerSec, v.BytesPerSec = float64(v.Objects)/secs, float64(v.Bytes)/secs
			}
		}
		if v.Objects <= 0 && v.Bytes <= 0 {
			continue
		}
		r.TotalObjects += v.Objects
		r.TotalBytes += v.Bytes
		all = append(all, v)
	}
	byBytes := append([]Site(nil), all...)
	sort.SliceStable(byBytes, func(i, j int) bool { return byBytes[i].Bytes > byBytes[j].Bytes })
	byObjects := append([]Site(nil), all...)
	sort.SliceStable(byObjects, func(i, j int) bool { return byObjects[i].Objects > byObjects[j].Objects })
	r.Sites = byBytes[:min(top, len(byBytes))]
	r.ByObjects = byObjects[:min(top, len(byObjects))]
}

// finishPprof marks the profile with what it covers.
func (r *Report) finishPprof() {
	p := r.prof
	when := "as of the last completed GC"
	if !r.LastGC.IsZero() {
		when += " (" + r.LastGC.UTC().Format(time.RFC3339Nano) + ")"
	}
	if r.Type == Allocs {
		p.DefaultSampleType = "alloc_space"
		p.DurationNanos = r.Window.Nanoseconds()
		if !r.LastGC.IsZero() {
			p.TimeNanos = r.LastGC.Add(-r.Window).UnixNano()
		}
		p.Comments = append(p.Comments, fmt.Sprintf("gosleuth profile --type allocs: allocated over %s between the GCs that ended before the two readings of a %s window; counts %s; inuse_* are the change of the live heap over it", r.Window.Round(time.Millisecond), r.Asked, when))
	} else {
		p.Comments = append(p.Comments, "gosleuth profile --type heap: live objects "+when)
	}
	p.Comments = append(p.Comments, fmt.Sprintf("read from the runtime's heap profile in the memory of process %d (%s), sampled once per %d bytes allocated, scaled", r.PID, r.GoVersion, r.Rate))
}

// EscapeRun says how the escape join went.
type EscapeRun struct {
	// Dir and Module are the source analysed.
	Dir    string `json:"dir,omitempty"`
	Module string `json:"module,omitempty"`
	// Toolchain is the Go release the analysis ran.
	Toolchain string `json:"toolchain,omitempty"`
	// Findings is how many diagnostics the compiler gave; Joined how many
	// of the top sites got a reason, of Sites in the module's code.
	Findings int `json:"findings"`
	Joined   int `json:"joined"`
	Sites    int `json:"sites"`
	// Err says why there is no join, in one line.
	Err string `json:"error,omitempty"`
}

// Join is the compiler's reason at a site.
type Join = escape.Join

// Reason is one finding of the compiler with its class and fix.
type Reason = escape.Reason

// frames converts a gomem stack for the escape join.
func frames(stack []gomem.Frame) []escape.Frame {
	out := make([]escape.Frame, len(stack))
	for i, f := range stack {
		out[i] = escape.Frame{Func: f.Func, File: f.File, Line: f.Line}
	}
	return out
}

// join runs the escape analysis and attaches reasons to the top sites.
func (r *Report) join(ctx context.Context, opts Options, all []gomem.Site) {
	run := &EscapeRun{}
	r.Escape = run
	var fs []escape.Frame
	for _, s := range all {
		fs = append(fs, frames(s.Stack)...)
	}
	for _, s := range r.Sites {
		fs = append(fs, frames(s.Stack)...)
	}
	prog, err := escape.AnalyseProgram(ctx, escape.ProgramOptions{FS: opts.FS, PID: opts.PID, Src: opts.Src, Frames: fs, GoVersion: opts.GoVersion})
	if err != nil {
		run.Err = err.Error()
		return
	}
	run.Dir, run.Module, run.Toolchain = prog.Module.Root, prog.Module.Path, prog.Toolchain
	run.Findings = len(prog.Result.Findings)
	for _, list := range [][]Site{r.Sites, r.ByObjects} {
		for i := range list {
			list[i].Escape = prog.Join(frames(list[i].Stack))
		}
	}
	// Count over the top sites by bytes.
	for _, s := range r.Sites {
		if s.Escape == nil {
			continue
		}
		run.Sites++
		if len(s.Escape.Reasons) > 0 {
			run.Joined++
		}
	}
}
