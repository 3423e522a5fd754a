package stacks

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gosleuth/gosleuth/internal/termsafe"
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

// WriteJSON writes s as one JSON object.
func (s *Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// WriteText writes s for a terminal.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d  %s\n", s.PID, s.Exe)
	fmt.Fprintf(&b, "%.1fs at %d Hz, %d threads, %d samples, %d lost\n", s.Seconds, s.Hz, s.Threads, s.Samples, s.Lost)
	if s.NewThreads > 0 {
		fmt.Fprintf(&b, "%d threads started during the run, each sampled within %.0f ms of its start\n", s.NewThreads, s.PickupMaxMS)
	}
	if s.Coverage != nil {
		fmt.Fprintf(&b, "sampled CPU %.2fs of %.2fs utime+stime from /proc (user %.2fs, sys %.2fs): coverage %.1f%%\n",
			s.SampledCPU, *s.ProcCPU, *s.ProcUser, *s.ProcSystem, 100**s.Coverage)
	} else {
		fmt.Fprintf(&b, "sampled CPU %.2fs (/proc times unavailable: no coverage)\n", s.SampledCPU)
	}
	fmt.Fprintf(&b, "user %.1f%%  kernel %.1f%%", 100*s.UserShare, 100*s.KernelShare)
	if s.UserOnly {
		b.WriteString(" (kernel from /proc, not sampled)")
	}
	b.WriteString("\n\nruntime classes\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, c := range s.OrderedClasses() {
		fmt.Fprintf(tw, "%.1f%%\t  %s\t\n", 100*c.Share, c.Class)
	}
	tw.Flush()
	b.WriteString("\ntop by flat (self) share\n")
	writeTop(&b, s.Top)
	b.WriteString("\ntop by cumulative share\n")
	writeTop(&b, s.TopCum)
	if s.GoFramesUnresolved > 0 || s.LeafCallersFixed > 0 {
		fmt.Fprintf(&b, "\nGo frames %d (%d unresolved); callers of frameless leaves recovered in %d samples\n",
			s.GoFrames, s.GoFramesUnresolved, s.LeafCallersFixed)
	}
	if o := s.OffCPU; o != nil {
		fmt.Fprintf(&b, "\noff-CPU: %.2fs blocked in %d recorded switch-outs (1 in %d, %d lost); %.2fs of idle runtime threads left out\n",
			o.Seconds, o.Switches, o.Every, o.Lost, o.FilteredSeconds)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, c := range orderedShares(o.Classes) {
			fmt.Fprintf(tw, "%.1f%%\t  %s\t\n", 100*c.Share, c.Class)
		}
		tw.Flush()
		b.WriteString("off-CPU top (flat: the Go code that blocked)\n")
		writeTop(&b, o.Top)
	}
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, termsafe.String(b.String())) // names come from the target's binary
	return err
}

func writeTop(b *strings.Builder, top []TopFunc) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "flat%%\tcum%%\t  function\t\n")
	for _, t := range top {
		fmt.Fprintf(tw, "%.1f%%\t%.1f%%\t  %s\t\n", 100*t.FlatShare, 100*t.CumShare, t.Function)
	}
	tw.Flush()
}

// offWeight expresses an off-CPU stack's blocked time in samples (at
// least 1), so folded stacks and flame graphs can show both kinds.
func (p *Profile) offWeight(st SymStack) int64 {
	return max(1, st.OffNS/max(1, p.Period.Nanoseconds()))
}

// OffCPURoot is the root frame of off-CPU stacks in folded output and the
// flame graph.
const OffCPURoot = "[off-cpu]"

// WriteFolded writes one line per distinct stack, root first, frames
// separated by ';' (kernel frames suffixed "_[k]", as perf's
// stackcollapse does), then a space and the sample count. The thread name
// is the root frame. Off-CPU stacks hang under an "[off-cpu]" root, with
// their blocked time counted in sampling periods.
func (p *Profile) WriteFolded(w io.Writer) error {
	agg := map[string]int64{}
	var b strings.Builder
	all := append(append([]SymStack(nil), p.Stacks...), p.OffCPU...)
	for _, st := range all {
		b.Reset()
		n := st.Count
		if st.OffCPU {
			b.WriteString(OffCPURoot + ";")
			n = p.offWeight(st)
		}
		b.WriteString(threadRoot(st.TID, p.Threads[st.TID]))
		for i := len(st.Frames) - 1; i >= 0; i-- {
			f := st.Frames[i]
			b.WriteByte(';')
			b.WriteString(strings.ReplaceAll(f.Func, ";", ":"))
			if f.Kernel {
				b.WriteString("_[k]")
			}
		}
		agg[b.String()] += n
	}
	keys := make([]string, 0, len(agg))
	for k := range agg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.Reset()
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d\n", k, agg[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

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
