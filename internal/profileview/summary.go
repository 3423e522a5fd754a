// Package profileview is the view behind "gosleuth profile" and the web
// page's flame graphs: it writes a stack profile (internal/stacks) as a
// summary (text or JSON), folded stacks, and a flame graph page or tree.
package profileview

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"
)

// WriteSummaryJSON writes s as one JSON object, with t's container
// ("container", as every command's JSON carries it) and PID in its own
// namespace ("nspid") where there are some.
func WriteSummaryJSON(w io.Writer, s *stacks.Summary, t Target) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*stacks.Summary
		NSPID     int             `json:"nspid,omitempty"`
		Container *proc.Container `json:"container,omitempty"`
	}{s, t.NSPID, t.Container})
}

// WriteSummaryText writes s for a terminal, t's container and PID inside
// it on the line under the process's.
func WriteSummaryText(w io.Writer, s *stacks.Summary, t Target) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d  %s\n", s.PID, s.Exe)
	if l := t.Line(); l != "" {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "%.1fs at %d Hz, %s, %s, %d lost\n", s.Seconds, s.Hz, units.Plural(s.Threads, "thread"), units.Plural(int(s.Samples), "sample"), s.Lost)
	if s.NewThreads > 0 {
		fmt.Fprintf(&b, "%s started during the run, each sampled within %.0f ms of its start\n", units.Plural(s.NewThreads, "thread"), s.PickupMaxMS)
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
		for _, c := range o.OrderedClasses() {
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

func writeTop(b *strings.Builder, top []stacks.TopFunc) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "flat%%\tcum%%\t  function\t\n")
	for _, t := range top {
		fmt.Fprintf(tw, "%.1f%%\t%.1f%%\t  %s\t\n", 100*t.FlatShare, 100*t.CumShare, t.Function)
	}
	tw.Flush()
}
