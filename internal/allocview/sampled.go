package allocview

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/probe"
)

// The allocator's slow paths sampled where the runtime keeps no heap
// profile: a P's cache takes a fresh span of a size class once the one it
// had is full (one call per span, not per object: about a thousand a second
// at 8 MiB/s), and objects over 32 KiB are allocated one call each.
const (
	refillFunc = "runtime.(*mcache).refill"
	largeFunc  = "runtime.(*mcache).allocLarge"
)

// Sampling says how an allocation profile was sampled from outside.
type Sampling struct {
	// Mechanism is how the probes were attached.
	Mechanism string `json:"mechanism"`
	// RefillPerSec is the span refills a second, LargePerSec the large
	// objects a second, both counted exactly.
	RefillPerSec float64 `json:"refill_per_sec"`
	LargePerSec  float64 `json:"large_per_sec"`
	// StackEvery is the stack sampling of refills: one in StackEvery.
	StackEvery int `json:"stack_every,omitempty"`
	// CostCPU is the target CPU the probes are estimated to have cost, as
	// a fraction of one CPU.
	CostCPU float64 `json:"cost_cpu"`
	// Bias states what the estimates can and cannot tell.
	Bias string `json:"bias"`
}

// samplingBias is the statement every sampled profile carries.
const samplingBias = "each span refill is charged to the allocation that found its size class's span full, so a site is seen in proportion to its share of spans, not of objects or bytes: " +
	"sites in large size classes (big spans, few objects) are over-seen against sites of tiny objects, and a site that shares its size class with a busier one is under-seen; " +
	"bytes/s per site are its share of refills times the runtime's own total of small allocations (exact), plus its large objects (each seen)"

// sampleAllocs profiles allocations over the window by probing the
// allocator's slow paths, for a binary whose linker turned memory
// profiling off. Nothing is written to the target.
func sampleAllocs(ctx context.Context, opts Options, p *gomem.Process, r *Report) error {
	st1, err := p.Stats()
	if err != nil {
		return fmt.Errorf("read the allocation totals: %w", err)
	}
	res, err := probe.Run(ctx, opts.FS, opts.PID, []probe.Probe{
		{Func: refillFunc, Stacks: true},
		{Func: largeFunc, Stacks: true, Arg: probe.RBX}, // RBX: the object's size
	}, probe.Options{Duration: opts.Duration})
	if err != nil {
		return fmt.Errorf("sample the allocator: %w", err)
	}
	st2, err := p.Stats()
	if err != nil {
		return fmt.Errorf("read the allocation totals: %w", err)
	}
	var refill, large *probe.FuncStat
	for i := range res.Funcs {
		switch res.Funcs[i].Func {
		case refillFunc:
			refill = &res.Funcs[i]
		case largeFunc:
			large = &res.Funcs[i]
		}
	}
	if refill == nil || refill.Skipped != "" {
		why := "not probed"
		if refill != nil {
			why = refill.Skipped
		}
		return fmt.Errorf("sample the allocator: %s: %s", refillFunc, why)
	}
	secs := st2.Time.Sub(st1.Time).Seconds()
	if secs <= 0 {
		return fmt.Errorf("sample the allocator: the window has no length")
	}
	r.Window = st2.Time.Sub(st1.Time)
	r.Read = st2.Time
	s := &Sampling{Mechanism: res.Mechanism, RefillPerSec: refill.PerSec, StackEvery: refill.StackEvery,
		CostCPU: res.CostCPU, Bias: samplingBias}
	r.Sampled = s
	r.Notes = append(r.Notes, res.Notes...)
	totalBytes := float64(st2.AllocBytes-st1.AllocBytes) / secs
	totalObjects := float64(st2.AllocObjects-st1.AllocObjects) / secs
	var largeBytes, largeCalls float64
	if large != nil && large.Skipped == "" {
		s.LargePerSec = large.PerSec
		var seen, sum float64
		for _, a := range large.Args {
			seen += float64(a.Count)
			sum += float64(a.Count) * float64(a.Value)
		}
		largeCalls = large.PerSec
		if seen > 0 {
			largeBytes = sum / seen * large.PerSec
		}
	} else if large != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("%s not probed (%s): large objects are in the totals only", largeFunc, large.Skipped))
	}
	smallBytes := max(totalBytes-largeBytes, 0)
	smallObjects := max(totalObjects-largeCalls, 0)
	type key struct {
		fn, file string
		line     int
	}
	idx := map[key]int{}
	var all []Site
	add := func(c probe.Caller, spans, bytes, objects float64) {
		k := key{c.Func, c.File, c.Line}
		i, ok := idx[k]
		if !ok {
			i = len(all)
			idx[k] = i
			// The site, then its callers: the sampled stack past the
			// allocator's frames and the site itself.
			st := []gomem.Frame{{Func: c.Func, File: c.File, Line: c.Line}}
			past := false
			for _, n := range c.Stack {
				if n == "runtime.goexit" {
					break
				}
				if past {
					st = append(st, gomem.Frame{Func: n})
				}
				past = past || n == c.Func
			}
			all = append(all, Site{Func: c.Func, File: c.File, Line: c.Line, Stack: st})
		}
		st := &all[i]
		st.SpansPerSec += spans
		st.BytesPerSec += bytes
		st.ObjectsPerSec += objects
	}
	for _, c := range refill.Callers {
		add(c, c.Share*refill.PerSec, c.Share*smallBytes, c.Share*smallObjects)
	}
	if large != nil {
		for _, c := range large.Callers {
			add(c, c.Share*large.PerSec, c.Share*largeBytes, c.Share*large.PerSec)
		}
	}
	for i := range all {
		all[i].Bytes = int64(all[i].BytesPerSec * secs)
		all[i].Objects = int64(all[i].ObjectsPerSec * secs)
	}
	r.TotalBytes = int64(totalBytes * secs)
	r.TotalObjects = int64(totalObjects * secs)
	byBytes := append([]Site(nil), all...)
	sort.SliceStable(byBytes, func(i, j int) bool { return byBytes[i].Bytes > byBytes[j].Bytes })
	byObjects := append([]Site(nil), all...)
	sort.SliceStable(byObjects, func(i, j int) bool { return byObjects[i].Objects > byObjects[j].Objects })
	r.Sites = byBytes[:min(opts.Top, len(byBytes))]
	r.ByObjects = byObjects[:min(opts.Top, len(byObjects))]
	r.prof = sampledPprof(r, all)
	return nil
}

// sampledPprof writes the sampled sites as a pprof profile of estimates.
func sampledPprof(r *Report, sites []Site) *profile.Profile {
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "spans", Unit: "count"}, {Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
		},
		PeriodType:        &profile.ValueType{Type: "spans", Unit: "count"},
		Period:            1,
		TimeNanos:         r.Read.Add(-r.Window).UnixNano(),
		DurationNanos:     r.Window.Nanoseconds(),
		DefaultSampleType: "alloc_space",
		Comments: []string{
			fmt.Sprintf("gosleuth profile --type allocs, sampled from outside (memory profiling is off in this binary): %s and %s probed over %s; estimates",
				refillFunc, largeFunc, r.Window.Round(time.Millisecond)),
			"bias: " + samplingBias,
		},
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	loc := func(f gomem.Frame) *profile.Location {
		k := fmt.Sprintf("%s\x00%s\x00%d", f.Func, f.File, f.Line)
		if l, ok := locs[k]; ok {
			return l
		}
		fn, ok := funcs[f.Func+"\x00"+f.File]
		if !ok {
			fn = &profile.Function{ID: uint64(len(prof.Function) + 1), Name: f.Func, SystemName: f.Func, Filename: f.File}
			funcs[f.Func+"\x00"+f.File] = fn
			prof.Function = append(prof.Function, fn)
		}
		l := &profile.Location{ID: uint64(len(prof.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
		locs[k] = l
		prof.Location = append(prof.Location, l)
		return l
	}
	for _, s := range sites {
		smp := &profile.Sample{Value: []int64{int64(s.SpansPerSec * r.Window.Seconds()), s.Objects, s.Bytes}}
		for _, f := range s.Stack {
			smp.Location = append(smp.Location, loc(f))
		}
		prof.Sample = append(prof.Sample, smp)
	}
	return prof
}

// sampledHeader is the text's statement of a sampled profile.
func sampledHeader(b *strings.Builder, r *Report) {
	s := r.Sampled
	fmt.Fprintf(b, "memory profiling is off in this binary: sampled from outside over %s by probing the allocator's slow path (%s, %.0f/s, stacks of 1 in %d; %s, %.0f/s), estimated cost %.2f%% of a CPU (%s); nothing written to the target\n",
		r.Window.Round(time.Millisecond), refillFunc, s.RefillPerSec, max(s.StackEvery, 1), largeFunc, s.LargePerSec, 100*s.CostCPU, s.Mechanism)
	fmt.Fprintf(b, "bias: %s\n", s.Bias)
}
