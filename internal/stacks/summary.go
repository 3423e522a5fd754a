package stacks

import (
	"sort"
)

// Summary is the terminal and JSON view of a profile.
type Summary struct {
	PID     int     `json:"pid"`
	Exe     string  `json:"exe"`
	Seconds float64 `json:"seconds"`
	Hz      int     `json:"hz"`
	Samples int64   `json:"samples"`
	Lost    int64   `json:"lost"`
	Threads int     `json:"threads"`
	// NewThreads started during the run; PickupMaxMS is the longest one
	// ran before it was sampled.
	NewThreads  int     `json:"new_threads"`
	PickupMaxMS float64 `json:"new_thread_pickup_max_ms"`
	UserOnly    bool    `json:"user_only"`
	Exited      bool    `json:"exited"`
	// SampledCPU is the CPU time the samples in the /proc window stand for,
	// ProcCPU the target's utime+stime over it, in seconds; Coverage their
	// ratio (null when /proc could not be read at both ends).
	SampledCPU  float64  `json:"sampled_cpu_seconds"`
	ProcCPU     *float64 `json:"proc_cpu_seconds"`
	ProcUser    *float64 `json:"proc_user_seconds"`
	ProcSystem  *float64 `json:"proc_system_seconds"`
	Coverage    *float64 `json:"coverage"`
	KernelShare float64  `json:"kernel_share"`
	UserShare   float64  `json:"user_share"`
	// Classes maps each runtime class to its share of samples.
	Classes map[string]float64 `json:"classes"`
	// Top lists functions by flat share, TopCum by cumulative share.
	Top    []TopFunc `json:"top"`
	TopCum []TopFunc `json:"top_cum"`
	// LeafCallersFixed counts samples whose frameless leaf's caller was
	// recovered; GoFrames and GoFramesUnresolved count Go user frames.
	LeafCallersFixed   int64    `json:"leaf_callers_fixed"`
	GoFrames           int      `json:"go_frames"`
	GoFramesUnresolved int      `json:"go_frames_unresolved"`
	Notes              []string `json:"notes,omitempty"`
	// OffCPU is there when off-CPU stacks were sampled.
	OffCPU *OffCPUSummary `json:"off_cpu,omitempty"`
}

// OrderedClasses is the off-CPU classes by share, largest first.
func (o *OffCPUSummary) OrderedClasses() []ClassShare { return orderedShares(o.Classes) }

// OffCPUSummary is where threads blocked.
type OffCPUSummary struct {
	// Seconds is the blocked time kept, FilteredSeconds that of idle
	// runtime threads left out.
	Seconds         float64 `json:"seconds"`
	FilteredSeconds float64 `json:"filtered_seconds"`
	// Switches counts recorded switch-outs, one in Every; Lost those the
	// kernel dropped.
	Switches int64 `json:"switches"`
	Every    int   `json:"every"`
	Lost     int64 `json:"lost"`
	// Classes maps classes to their share of the blocked time kept.
	Classes map[string]float64 `json:"classes"`
	// Top lists functions by blocked time: flat is the innermost user
	// frame (the Go code that blocked), cum any frame.
	Top []TopFunc `json:"top"`
}

// TopFunc is one function's share of samples.
type TopFunc struct {
	Function  string  `json:"function"`
	FlatShare float64 `json:"flat_share"`
	CumShare  float64 `json:"cum_share"`
}

// ClassShare is one class and its share, for ordered output.
type ClassShare struct {
	Class Class
	Share float64
}

// Summarize computes the summary with the top n functions.
func (p *Profile) Summarize(n int) *Summary {
	s := &Summary{
		PID: p.PID, Exe: p.Exe, Seconds: p.End.Sub(p.Start).Seconds(), Hz: p.Hz,
		Samples: p.Samples, Lost: p.Lost, Threads: p.ThreadsSeen,
		NewThreads: p.NewThreads, PickupMaxMS: float64(p.PickupMax.Microseconds()) / 1000, UserOnly: p.UserOnly, Exited: p.Exited,
		Classes: map[string]float64{}, Top: []TopFunc{}, TopCum: []TopFunc{}, LeafCallersFixed: p.LeafFixed,
		GoFrames: p.GoFrames, GoFramesUnresolved: p.GoUnknown, Notes: p.Notes,
	}
	var total, kernel int64
	flat, cum := map[string]int64{}, map[string]int64{}
	for _, st := range p.Stacks {
		total += st.Count
		if st.Mode == ModeKernel {
			kernel += st.Count
		}
		s.Classes[string(st.Class)] += float64(st.Count)
		if len(st.Frames) > 0 {
			flat[st.Frames[0].Func] += st.Count
		}
		seen := map[string]bool{}
		for _, f := range st.Frames {
			if !seen[f.Func] {
				seen[f.Func] = true
				cum[f.Func] += st.Count
			}
		}
	}
	s.SampledCPU = (float64(p.WindowSamples) * p.Period.Seconds())
	if p.CPU.Known {
		u, sy := p.CPU.User.Seconds(), p.CPU.System.Seconds()
		c := u + sy
		s.ProcCPU, s.ProcUser, s.ProcSystem = &c, &u, &sy
		if c > 0 {
			cov := s.SampledCPU / c
			s.Coverage = &cov
		}
	}
	if p.OffCPU != nil || p.OffCPUSwitches > 0 {
		s.OffCPU = p.summarizeOffCPU(n)
	}
	if total == 0 {
		return s
	}
	s.KernelShare = float64(kernel) / float64(total)
	s.UserShare = 1 - s.KernelShare
	for k := range s.Classes {
		s.Classes[k] /= float64(total)
	}
	mk := func(m map[string]int64) []TopFunc {
		var out []TopFunc
		for f := range m {
			out = append(out, TopFunc{f, float64(flat[f]) / float64(total), float64(cum[f]) / float64(total)})
		}
		return out
	}
	s.Top = mk(flat)
	sort.Slice(s.Top, func(i, j int) bool {
		if s.Top[i].FlatShare != s.Top[j].FlatShare {
			return s.Top[i].FlatShare > s.Top[j].FlatShare
		}
		return s.Top[i].Function < s.Top[j].Function
	})
	s.TopCum = mk(cum)
	sort.Slice(s.TopCum, func(i, j int) bool {
		if s.TopCum[i].CumShare != s.TopCum[j].CumShare {
			return s.TopCum[i].CumShare > s.TopCum[j].CumShare
		}
		return s.TopCum[i].Function < s.TopCum[j].Function
	})
	if len(s.Top) > n {
		s.Top = s.Top[:n]
	}
	if len(s.TopCum) > n {
		s.TopCum = s.TopCum[:n]
	}
	return s
}

// OrderedClasses returns the classes by decreasing share.
func (s *Summary) OrderedClasses() []ClassShare { return orderedShares(s.Classes) }

func orderedShares(m map[string]float64) []ClassShare {
	var out []ClassShare
	for c, v := range m {
		out = append(out, ClassShare{Class(c), v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Share != out[j].Share {
			return out[i].Share > out[j].Share
		}
		return out[i].Class < out[j].Class
	})
	return out
}

// OffWeight expresses an off-CPU stack's blocked time in samples (at
// least 1), so folded stacks and flame graphs can show both kinds.
func (p *Profile) OffWeight(st SymStack) int64 {
	return max(1, st.OffNS/max(1, p.Period.Nanoseconds()))
}

// OffCPURoot is the root frame of off-CPU stacks in folded output and the
// flame graph.
const OffCPURoot = "[off-cpu]"

func (p *Profile) summarizeOffCPU(n int) *OffCPUSummary {
	o := &OffCPUSummary{FilteredSeconds: float64(p.OffCPUFiltered) / 1e9, Switches: p.OffCPUSwitches,
		Every: p.OffCPUEvery, Lost: p.OffCPULost, Classes: map[string]float64{}, Top: []TopFunc{}}
	var total int64
	flat, cum := map[string]int64{}, map[string]int64{}
	for _, st := range p.OffCPU {
		total += st.OffNS
		o.Classes[string(st.Class)] += float64(st.OffNS)
		seen := map[string]bool{}
		leaf := false
		for _, f := range st.Frames {
			if !f.Kernel && !leaf {
				flat[f.Func] += st.OffNS
				leaf = true
			}
			if !seen[f.Func] {
				seen[f.Func] = true
				cum[f.Func] += st.OffNS
			}
		}
	}
	o.Seconds = float64(total) / 1e9
	if total == 0 {
		return o
	}
	for k := range o.Classes {
		o.Classes[k] /= float64(total)
	}
	for f, v := range cum {
		o.Top = append(o.Top, TopFunc{f, float64(flat[f]) / float64(total), float64(v) / float64(total)})
	}
	sort.Slice(o.Top, func(i, j int) bool {
		if o.Top[i].FlatShare != o.Top[j].FlatShare {
			return o.Top[i].FlatShare > o.Top[j].FlatShare
		}
		if o.Top[i].CumShare != o.Top[j].CumShare {
			return o.Top[i].CumShare > o.Top[j].CumShare
		}
		return o.Top[i].Function < o.Top[j].Function
	})
	if len(o.Top) > n {
		o.Top = o.Top[:n]
	}
	return o
}
