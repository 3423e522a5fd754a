package stacks

import (
	"io"
	"strconv"

	"github.com/google/pprof/profile"
)

// PprofProfile converts p to pprof's model: sample types samples/count and
// cpu/nanoseconds, the executable's mapping first, one Location per address
// with inlined functions as extra Lines, and labels tid, thread, mode
// (user, kernel, or offcpu for off-CPU samples, whose values are switches
// and blocked nanoseconds) and class.
func (p *Profile) PprofProfile() *profile.Profile {
	period := p.Period.Nanoseconds()
	out := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: "cpu", Unit: "nanoseconds"},
		},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        period,
		TimeNanos:     p.Start.UnixNano(),
		DurationNanos: p.End.Sub(p.Start).Nanoseconds(),
		Comments:      p.Notes,
	}
	for i, m := range p.Mappings {
		out.Mapping = append(out.Mapping, &profile.Mapping{
			ID: uint64(i + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset,
			File: m.File, BuildID: m.BuildID,
			HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true,
		})
	}
	type fkey struct{ name, file string }
	funcs := map[fkey]*profile.Function{}
	function := func(f Frame) *profile.Function {
		k := fkey{f.Func, f.File}
		if fn, ok := funcs[k]; ok {
			return fn
		}
		fn := &profile.Function{ID: uint64(len(out.Function) + 1), Name: f.Func, SystemName: f.Func, Filename: f.File}
		funcs[k] = fn
		out.Function = append(out.Function, fn)
		return fn
	}
	type lkey struct {
		addr   uint64
		kernel bool
		first  string // distinguishes synthetic and exact-vs-return lookups
	}
	locs := map[lkey]*profile.Location{}
	addSample := func(st SymStack, count, ns int64, mode string) {
		s := &profile.Sample{
			Value:    []int64{count, ns},
			Label:    map[string][]string{"mode": {mode}, "class": {string(st.Class)}},
			NumLabel: map[string][]int64{"tid": {int64(st.TID)}},
		}
		if name := p.Threads[st.TID]; name != "" {
			s.Label["thread"] = []string{name}
		}
		fr := st.Frames
		for i := 0; i < len(fr); {
			// A Location is a run of frames with the same address: the
			// inlined ones and the function they sit in.
			j := i
			for j+1 < len(fr) && fr[j].Inlined {
				j++
			}
			j++
			k := lkey{fr[i].Addr, fr[i].Kernel, fr[i].Func}
			loc, ok := locs[k]
			if !ok {
				loc = &profile.Location{ID: uint64(len(out.Location) + 1), Address: fr[i].Addr}
				if fr[i].Map >= 0 && fr[i].Map < len(out.Mapping) {
					loc.Mapping = out.Mapping[fr[i].Map]
				}
				for _, f := range fr[i:j] {
					loc.Line = append(loc.Line, profile.Line{Function: function(f.Frame), Line: int64(f.Line)})
				}
				locs[k] = loc
				out.Location = append(out.Location, loc)
			}
			s.Location = append(s.Location, loc)
			i = j
		}
		out.Sample = append(out.Sample, s)
	}
	for _, st := range p.Stacks {
		addSample(st, st.Count, st.Count*period, st.Mode.String())
	}
	for _, st := range p.OffCPU {
		addSample(st, st.Count, st.OffNS, "offcpu")
	}
	return out
}

// WritePprof writes p gzipped in pprof's protobuf format.
func (p *Profile) WritePprof(w io.Writer) error {
	return p.PprofProfile().Write(w)
}

// ThreadRoot is the root frame of a thread's stacks in folded output and
// flame graphs: its name, which Go threads share, or its TID.
func ThreadRoot(tid int, name string) string {
	if name == "" {
		return "tid " + strconv.Itoa(tid)
	}
	return name
}
