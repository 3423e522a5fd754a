package inspect

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/units"
)

// Books is what the runtime's own books said, read from the process's
// memory at the end of the window: no agent, no endpoint, no pause.
type Books struct {
	GoVersion string `json:"go_version"`
	// Layout says where the runtime's layout came from ("dwarf",
	// "table"), Located how its variables were found.
	Layout  string `json:"layout"`
	Located string `json:"located"`
	// ReadTime is what reading the books took gosleuth (wall time).
	ReadTime time.Duration `json:"read_ns"`
	Census   *gomem.Census `json:"census"`
	Stats    *gomem.Stats  `json:"stats,omitempty"`
	// Heap is the heap profile's top allocation sites by bytes in use;
	// HeapNote says why there is none.
	Heap     []gomem.Site `json:"heap_sites,omitempty"`
	HeapNote string       `json:"heap_note,omitempty"`
	Notes    []string     `json:"notes,omitempty"`
}

// readBooks reads the statistics and heap profile of p beside census c,
// keeping the top groups and sites.
func readBooks(p *gomem.Process, c *gomem.Census, top int) *Books {
	start := time.Now()
	b := &Books{GoVersion: p.GoVersion, Layout: p.Layout.From, Located: p.Located}
	cc := *c
	cc.Stacks = nil // the goroutine dump carries them
	if len(cc.Groups) > top {
		cc.Groups = cc.Groups[:top]
	}
	b.Census = &cc
	if st, err := p.Stats(); err == nil {
		b.Stats = st
	} else {
		b.Notes = append(b.Notes, "runtime statistics: "+err.Error())
	}
	h, err := p.HeapProfile()
	switch {
	case errors.Is(err, gomem.ErrMemProfilingOff):
		b.HeapNote = err.Error()
	case err != nil:
		b.HeapNote = "heap profile: " + err.Error()
	default:
		sites := p.Sites(h)
		if len(sites) > top {
			sites = sites[:top]
		}
		b.Heap = sites
		b.Notes = append(b.Notes, h.Notes...)
		if len(sites) == 0 {
			b.HeapNote = "heap profile empty (no allocation sampled yet)"
		}
	}
	b.ReadTime = time.Since(start) + c.Took
	return b
}

// writeBooks renders the books as text; w escapes the target's strings.
func (r *Report) writeBooks(w io.Writer) {
	b := r.Books
	fmt.Fprintf(w, "\nruntime books\tread from memory in %s, no pause (%s, layout from %s, variables from the %s)\n",
		b.ReadTime.Round(time.Microsecond), b.GoVersion, b.Layout, b.Located)
	c := b.Census
	var states []string
	for _, s := range sortedStates(c.ByState) {
		states = append(states, fmt.Sprintf("%s %d", s, c.ByState[s]))
	}
	created := ""
	if c.CreatedKnown {
		created = fmt.Sprintf(", %d created since start", c.Created)
	}
	fmt.Fprintf(w, "goroutines\t%d (%d the runtime's own)%s, stacks %s: %s\n", c.Total, c.System, created,
		units.Bytes(c.StackBytes), strings.Join(states, ", "))
	for _, g := range c.Groups {
		wait := ""
		if g.MaxWait > 0 {
			wait = fmt.Sprintf(", waiting up to %s", g.MaxWait.Round(time.Second))
		}
		fmt.Fprintf(w, "  %d\t%s in %s (created at %s:%d), stacks %s%s\n", g.Count, g.State,
			g.Start.Func, g.CreatedBy.File, g.CreatedBy.Line, units.Bytes(g.StackBytes), wait)
	}
	if st := b.Stats; st != nil {
		gogc := fmt.Sprint(st.GOGC)
		if st.GOGC < 0 {
			gogc = "off"
		}
		limit := "none"
		if st.MemoryLimit > 0 && st.MemoryLimit < 1<<62 {
			limit = units.Bytes(uint64(st.MemoryLimit))
		}
		fmt.Fprintf(w, "GC state\t%d cycles, GOGC %s, memory limit %s; heap marked %s, goal %s; stacks in use %s\n",
			st.GCCycles, gogc, limit, units.Bytes(st.HeapMarked), units.Bytes(st.HeapGoal), units.Bytes(st.StackInUse))
		if st.CPUTotal > 0 {
			fmt.Fprintf(w, "GC CPU\t%.1f%% of the CPU available since start (assist %.1f%%), as of the last cycle\n",
				100*st.GCTotal.Seconds()/st.CPUTotal.Seconds(), 100*st.GCAssist.Seconds()/st.CPUTotal.Seconds())
		}
		fmt.Fprintf(w, "scheduler\tidle Ps %d of %d, spinning Ms %d, idle Ms %d, threads %d, run queues global %d local %v\n",
			st.IdlePs, st.GOMAXPROCS, st.SpinningMs, st.IdleMs, st.Threads, st.GlobalRunq, st.LocalRunqs)
		total := 0
		for _, n := range st.TimersPerP {
			total += n
		}
		var per []string
		for _, t := range st.Periodic {
			per = append(per, fmt.Sprintf("%d × every %s in %s", t.Count, t.Period, t.Func))
		}
		if len(per) > 5 {
			per = per[:5]
		}
		fmt.Fprintf(w, "timers\t%d on the Ps %v; periodic: %s\n", total, st.TimersPerP, orNone(strings.Join(per, "; ")))
		if len(st.Missing) > 0 {
			fmt.Fprintf(w, "not read\t%s\n", strings.Join(st.Missing, "; "))
		}
	}
	if b.HeapNote != "" {
		fmt.Fprintf(w, "heap profile\t%s\n", b.HeapNote)
	}
	if len(b.Heap) > 0 {
		fmt.Fprintf(w, "heap profile\ttop sites by bytes in use (estimates, as pprof's heap profile):\n")
		for _, s := range b.Heap {
			fmt.Fprintf(w, "  %s in use (%s objects)\t%s (%s:%d); allocated %s (%s objects) since start\n",
				units.Bytes(uint64(s.InUseBytes)), num(float64(s.InUseObjects)), s.Func,
				s.File, s.Line, units.Bytes(uint64(s.AllocBytes)), num(float64(s.AllocObjects)))
		}
	}
	for _, n := range b.Notes {
		fmt.Fprintf(w, "note\t%s\n", n)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sortedStates orders states by count, largest first.
func sortedStates(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if m[out[i]] != m[out[j]] {
			return m[out[i]] > m[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}
