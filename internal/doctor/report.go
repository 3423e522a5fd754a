package doctor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"
)

// Report is the doctor's verdict.
type Report struct {
	Host      HostSummary     `json:"host"`
	Processes []ProcessReport `json:"processes"`
	// Unchecked lists rules that could not be decided, with what was
	// missing and the processes concerned.
	Unchecked []UncheckedRule `json:"unchecked"`
	// Notes are things the reader should know about the run itself
	// (sources that failed, processes that exited, interruptions).
	Notes []string `json:"notes"`
}

// HostSummary describes the run and adds the cost of each finding up over
// all processes.
type HostSummary struct {
	CPUs int `json:"cpus"`
	// Processes and Threads count what the window watched: the host's, or
	// with PIDs named, theirs.
	Processes       int       `json:"processes"`
	Threads         int       `json:"threads"`
	Start           time.Time `json:"start"`
	DurationSeconds float64   `json:"duration_s"`
	// Costs lists, per finding id, the processes it was found in and the
	// CPU it costs in total.
	Costs []Cost `json:"costs"`
}

// Cost is the CPU one kind of finding burns across the host.
type Cost struct {
	ID        string  `json:"id"`
	Processes int     `json:"processes"`
	Cores     float64 `json:"cpu_cores"`
	// CoresPer1000 is what the same finding would cost on 1,000 such
	// processes (a fleet of sidecars, say).
	CoresPer1000 float64 `json:"cpu_cores_per_1000_processes"`
}

// ProcessReport is one process with its findings.
type ProcessReport struct {
	PID       int    `json:"pid"`
	Comm      string `json:"comm"`
	Cmdline   string `json:"cmdline,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	// Container is the container the process runs in, from its cgroup
	// path; absent on the host.
	Container     *proc.Container `json:"container,omitempty"`
	Exited        bool            `json:"exited,omitempty"`
	CPUPct        float64         `json:"cpu_pct"`
	SysPct        float64         `json:"sys_pct"`
	WakeupsPerSec float64         `json:"wakeups_per_s"`
	Threads       int             `json:"threads"`
	RSSBytes      uint64          `json:"rss_bytes"`
	Sources       []Source        `json:"sources"`
	// StackClasses and TopSyscalls summarise the close look, when taken;
	// Samples is the number of stack samples.
	StackClasses map[string]float64 `json:"stack_classes,omitempty"`
	Samples      int                `json:"stack_samples,omitempty"`
	TopSyscalls  string             `json:"top_syscalls,omitempty"`
	Findings     []Finding          `json:"findings"`
}

// UncheckedRule is a rule that could not be decided, and where.
type UncheckedRule struct {
	Rule string `json:"rule"`
	Why  string `json:"why"`
	PIDs []int  `json:"pids"`
}

// Diagnose evaluates every rule on every window. Processes with findings are
// listed worst first; with explicit PIDs (all true) every window is listed.
func Diagnose(ws []*Window, h *Host, notes []string, all bool) *Report {
	rep := &Report{
		Host: HostSummary{CPUs: h.CPUs, Processes: h.Procs, Threads: h.Tasks, Start: h.Start,
			DurationSeconds: round(h.End.Sub(h.Start).Seconds(), 2), Costs: []Cost{}},
		Processes: []ProcessReport{},
		Unchecked: []UncheckedRule{},
		Notes:     append([]string{}, notes...),
	}
	if all {
		// The processes named are what was watched: the header counts
		// them, not the host's.
		rep.Host.Processes, rep.Host.Threads = len(ws), 0
		for _, w := range ws {
			rep.Host.Threads += w.Threads()
		}
	}
	costs := map[string]*Cost{}
	unchecked := map[[2]string]*UncheckedRule{}
	var exited []*Window
	for _, w := range ws {
		found, un := Evaluate(w, h)
		for _, u := range un {
			k := [2]string{u.Rule, u.Why}
			if unchecked[k] == nil {
				unchecked[k] = &UncheckedRule{Rule: u.Rule, Why: u.Why}
			}
			unchecked[k].PIDs = append(unchecked[k].PIDs, u.PID)
		}
		if w.Exited {
			exited = append(exited, w)
		}
		if len(found) == 0 && !all {
			continue
		}
		for _, f := range found {
			c := costs[f.ID]
			if c == nil {
				c = &Cost{ID: f.ID}
				costs[f.ID] = c
			}
			c.Processes++
			c.Cores += f.Cores
		}
		pr := ProcessReport{
			PID: w.PID, Comm: w.Comm, Cmdline: w.Cmdline, GoVersion: w.GoVersion, Container: w.Container, Exited: w.Exited,
			CPUPct: pct(w.Cores()), SysPct: pct(perSec(w.SysSec, w.Seconds())),
			WakeupsPerSec: round(w.WakeupsPerSec(), 1), Threads: w.Threads(),
			Sources: windowSources(w), Findings: found,
		}
		if w.Stacks != nil {
			pr.Samples = w.Stacks.Samples
			pr.StackClasses = map[string]float64{}
			for k, v := range w.Stacks.Classes {
				pr.StackClasses[k] = round(v, 3)
			}
		}
		if w.Syscalls != nil && w.Syscalls.Total() > 0 {
			pr.TopSyscalls = topSyscalls(w.Syscalls, 5)
		}
		if pr.Findings == nil {
			pr.Findings = []Finding{}
		}
		if len(w.Series) > 0 {
			pr.RSSBytes = w.Series[len(w.Series)-1].RSS
		}
		rep.Processes = append(rep.Processes, pr)
	}
	rep.Notes = append(rep.Notes, exitedNotes(exited)...)
	slices.SortStableFunc(rep.Processes, func(a, b ProcessReport) int {
		if c := cmp.Compare(worst(b), worst(a)); c != 0 {
			return c
		}
		return cmp.Compare(b.CPUPct, a.CPUPct)
	})
	for _, c := range costs {
		c.Cores = round(c.Cores, 4)
		c.CoresPer1000 = round(c.Cores/float64(c.Processes)*1000, 1)
		rep.Host.Costs = append(rep.Host.Costs, *c)
	}
	slices.SortFunc(rep.Host.Costs, func(a, b Cost) int {
		if c := cmp.Compare(b.Cores, a.Cores); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, u := range unchecked {
		u.Why = notedWhy(u, rep.Notes)
		rep.Unchecked = append(rep.Unchecked, *u)
	}
	slices.SortFunc(rep.Unchecked, func(a, b UncheckedRule) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Why, b.Why))
	})
	return rep
}

// notedWhy is u's reason, without its pointer to the notes where no note
// speaks of its processes: a reason never sends the reader to notes that
// do not exist.
func notedWhy(u *UncheckedRule, notes []string) string {
	need, ok := strings.CutSuffix(u.Why, seeNotes)
	if !ok {
		return u.Why
	}
	for _, n := range notes {
		for _, pid := range u.PIDs {
			if strings.HasPrefix(n, fmt.Sprintf("pid %d:", pid)) {
				return u.Why
			}
		}
	}
	return need + " (no error was reported: the window may have been too short for it)"
}

// exitedNotes says which windows' processes exited during the window: one
// note each for a few, else one note that counts them by command, the most
// first (under process churn a host-wide window sees hundreds exit, and a
// line for each buried the report's other notes).
func exitedNotes(ws []*Window) []string {
	const each = 3
	if len(ws) <= each {
		out := make([]string, 0, len(ws))
		for _, w := range ws {
			out = append(out, fmt.Sprintf("pid %d (%s) exited during the window; findings cover what was seen", w.PID, w.Comm))
		}
		return out
	}
	byComm := map[string]int{}
	for _, w := range ws {
		byComm[w.Comm]++
	}
	comms := slices.Collect(maps.Keys(byComm))
	slices.SortFunc(comms, func(a, b string) int {
		return cmp.Or(cmp.Compare(byComm[b], byComm[a]), cmp.Compare(a, b))
	})
	const named = 5
	var parts []string
	for i, c := range comms {
		if i == named {
			parts = append(parts, fmt.Sprintf("%d more commands", len(comms)-named))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", c, byComm[c]))
	}
	return []string{fmt.Sprintf("%d processes exited during the window (%s); findings cover what was seen", len(ws), strings.Join(parts, ", "))}
}

func worst(p ProcessReport) int {
	w := -1
	for _, f := range p.Findings {
		w = max(w, int(f.Severity))
	}
	return w
}

func windowSources(w *Window) []Source {
	s := []Source{SourceProc}
	if w.Syscalls != nil {
		s = append(s, SourceSyscalls)
	}
	if w.Stacks != nil {
		s = append(s, SourceStacks)
	}
	if w.Runtime != nil {
		s = append(s, SourceRuntime)
	}
	if w.Probes != nil {
		s = append(s, SourceProbes)
	}
	if w.Files != nil {
		s = append(s, SourceFDs)
	}
	return s
}

// Count returns how many findings have at least severity min.
func (r *Report) Count(min Severity) int {
	n := 0
	for _, p := range r.Processes {
		for _, f := range p.Findings {
			if f.Severity >= min {
				n++
			}
		}
	}
	return n
}

// WriteJSON writes the report as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// ansi colours for the text report on a terminal.
var sevColour = [...]string{"\x1b[36m", "\x1b[33m", "\x1b[1;31m"}

// WriteText writes the report for a human at a terminal, worst first; with
// colour, severities are coloured.
func (r *Report) WriteText(w io.Writer, colour bool) error {
	var b strings.Builder
	h := r.Host
	fmt.Fprintf(&b, "gosleuth doctor: %s, %s, %s, %.1f s window\n", units.Plural(h.Processes, "process"), units.Plural(h.Threads, "thread"), units.Plural(h.CPUs, "CPU"), h.DurationSeconds)
	if len(r.Processes) == 0 {
		b.WriteString("\nNo findings.\n")
	}
	groups := r.alikeGroups()
	for i, p := range r.Processes {
		group, ok := groups[i]
		if !ok {
			continue // written on its first member's line
		}
		goVer := ""
		if p.GoVersion != "" {
			goVer = " " + p.GoVersion
		}
		exited := ""
		if p.Container != nil {
			exited = " [container " + p.Container.String() + "]"
		}
		if p.Exited {
			exited += " (exited)"
		}
		fmt.Fprintf(&b, "\n%d %s%s%s  cpu %.1f%% (sys %.1f%%)  wake %.0f/s  threads %d  rss %s  [%s]\n",
			p.PID, p.Comm, goVer, exited, p.CPUPct, p.SysPct, p.WakeupsPerSec, p.Threads, units.Bytes(p.RSSBytes), joinSources(p.Sources))
		if len(p.Findings) == 0 {
			b.WriteString("  no findings\n")
		}
		for _, f := range p.Findings {
			sev := strings.ToUpper(f.Severity.String())
			kind := ""
			if f.Kind == "symptom" {
				kind = " (symptom: no cause found)"
			}
			fmt.Fprintf(&b, "  %-8s %s%s: %s\n", sev, f.ID, kind, f.Title)
			fmt.Fprintf(&b, "           evidence: %s\n", evidenceText(f.Evidence))
			for _, s := range f.Symptoms {
				fmt.Fprintf(&b, "           explains %s: %s [%s]\n", s.ID, s.Observed, evidenceText(s.Evidence))
			}
			for _, c := range f.Code {
				fmt.Fprintf(&b, "           code: %s\n", codeText(c))
				if e := escapeText(c.Escape); e != "" {
					fmt.Fprintf(&b, "             %s\n", e)
				}
			}
			fmt.Fprintf(&b, "           cause: %s\n", f.Cause)
			fmt.Fprintf(&b, "           fix: %s\n", f.Fix)
			fmt.Fprintf(&b, "           sources: %s; confidence %s\n", joinSources(f.Sources), f.Confidence)
		}
		if len(group) > 1 {
			fmt.Fprintf(&b, "  and %s\n", r.alikeOthers(group))
		}
	}
	if len(h.Costs) > 0 {
		b.WriteString("\nHost summary (CPU each kind of finding burns, and on 1,000 such processes):\n")
		for _, c := range h.Costs {
			if c.Cores == 0 {
				fmt.Fprintf(&b, "  %-22s %3d process(es)\n", c.ID, c.Processes)
				continue
			}
			fmt.Fprintf(&b, "  %-22s %3d process(es)  %.3f cores  -> %.1f cores per 1,000\n", c.ID, c.Processes, c.Cores, c.CoresPer1000)
		}
	}
	if len(r.Unchecked) > 0 {
		b.WriteString("\nNot checked:\n")
		for _, u := range r.Unchecked {
			fmt.Fprintf(&b, "  %-22s %s (%s)\n", u.Rule, u.Why, pidList(u.PIDs))
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	// Names, command lines, paths and function names in the report are
	// other users' text: escaped before they reach a terminal. Colour is
	// added after, so its own escapes are the only ones.
	text := termsafe.String(b.String())
	if colour {
		text = colourSeverities(text)
	}
	_, err := io.WriteString(w, text)
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// alikeMin is how many processes with findings that read alike (see
// alikeKey) the text and markdown reports write as one: under 5,000 new processes a
// second it had 50 blocks of the same exec-hot-path finding, one per
// forking shell, with only their figures differing.
const alikeMin = 3

// alikeGroups maps the index of each process the text and markdown
// reports write to the processes written with it: itself alone, or itself
// and the others that read alike when there are at least alikeMin of them.
// A process written with an earlier one has no entry.
func (r *Report) alikeGroups() map[int][]int {
	alike := map[string][]int{}
	keys := make([]string, len(r.Processes))
	for i, p := range r.Processes {
		if keys[i] = alikeKey(p); keys[i] != "" {
			alike[keys[i]] = append(alike[keys[i]], i)
		}
	}
	out := make(map[int][]int, len(r.Processes))
	for i := range r.Processes {
		group := alike[keys[i]]
		switch {
		case len(group) < alikeMin:
			out[i] = []int{i}
		case group[0] == i:
			out[i] = group
		}
	}
	return out
}

// alikeOthers names the processes of group after its first, written with
// it: "4 more sh processes with the same findings (...): pid 1001, ...".
func (r *Report) alikeOthers(group []int) string {
	pids := make([]int, 0, len(group)-1)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, j := range group[1:] {
		pids = append(pids, r.Processes[j].PID)
		lo, hi = math.Min(lo, r.Processes[j].CPUPct), math.Max(hi, r.Processes[j].CPUPct)
	}
	return fmt.Sprintf("%d more %s processes with the same findings (their figures differ; cpu %.1f-%.1f%% each; --format json lists each): %s",
		len(pids), r.Processes[group[0]].Comm, lo, hi, pidList(pids))
}

// alikeKey is what processes whose findings read alike share: name, Go
// version, exit, sources, and each finding's rule and severity; "" for a
// process whose findings name code (that is what tells them apart) or
// that has none.
func alikeKey(p ProcessReport) string {
	if len(p.Findings) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %v %s", p.Comm, p.GoVersion, p.Exited, joinSources(p.Sources))
	for _, f := range p.Findings {
		if len(f.Code) > 0 {
			return ""
		}
		fmt.Fprintf(&b, " %s/%s/%s/%s", f.ID, f.Severity, f.Kind, joinSources(f.Sources))
	}
	return b.String()
}

// WriteMarkdown writes the report for a ticket.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	h := r.Host
	fmt.Fprintf(&b, "# gosleuth doctor\n\n%s, %s, %s, %.1f s window from %s.\n",
		units.Plural(h.Processes, "process"), units.Plural(h.Threads, "thread"), units.Plural(h.CPUs, "CPU"), h.DurationSeconds, h.Start.UTC().Format(time.RFC3339))
	if len(r.Processes) == 0 {
		b.WriteString("\nNo findings.\n")
	}
	groups := r.alikeGroups()
	for i, p := range r.Processes {
		group, ok := groups[i]
		if !ok {
			continue // written in its first member's section
		}
		fmt.Fprintf(&b, "\n## %d `%s`", p.PID, p.Comm)
		if p.GoVersion != "" {
			fmt.Fprintf(&b, " (%s)", p.GoVersion)
		}
		if p.Container != nil {
			fmt.Fprintf(&b, " in container %s", p.Container)
		}
		fmt.Fprintf(&b, "\n\nCPU %.1f%% (sys %.1f%%), %.0f wake-ups/s, %s, RSS %s. Sources: %s.\n",
			p.CPUPct, p.SysPct, p.WakeupsPerSec, units.Plural(p.Threads, "thread"), units.Bytes(p.RSSBytes), joinSources(p.Sources))
		for _, f := range p.Findings {
			kind := ""
			if f.Kind == "symptom" {
				kind = " (symptom: no cause found)"
			}
			fmt.Fprintf(&b, "\n### %s `%s`%s: %s\n\n", strings.ToUpper(f.Severity.String()), f.ID, kind, f.Title)
			b.WriteString("| evidence | value |\n|---|---|\n")
			for _, e := range f.Evidence {
				fmt.Fprintf(&b, "| %s | %v %s |\n", e.Name, e.Value, e.Unit)
			}
			if len(f.Symptoms) > 0 {
				b.WriteString("\nExplains:\n\n")
				for _, s := range f.Symptoms {
					fmt.Fprintf(&b, "- `%s`: %s (%s)\n", s.ID, s.Observed, evidenceText(s.Evidence))
				}
			}
			if len(f.Code) > 0 {
				b.WriteString("\nCode:\n\n")
				for _, c := range f.Code {
					fmt.Fprintf(&b, "- %s\n", codeText(c))
					if e := escapeText(c.Escape); e != "" {
						fmt.Fprintf(&b, "  - %s\n", e)
					}
				}
			}
			fmt.Fprintf(&b, "\n**Cause.** %s\n\n**Fix.** %s\n\nSources: %s; confidence %s.\n", f.Cause, f.Fix, joinSources(f.Sources), f.Confidence)
		}
		if len(group) > 1 {
			fmt.Fprintf(&b, "\nAnd %s.\n", r.alikeOthers(group))
		}
	}
	if len(h.Costs) > 0 {
		b.WriteString("\n## Host summary\n\n| finding | processes | CPU cores | per 1,000 processes |\n|---|---|---|---|\n")
		for _, c := range h.Costs {
			fmt.Fprintf(&b, "| %s | %d | %.3f | %.1f |\n", c.ID, c.Processes, c.Cores, c.CoresPer1000)
		}
	}
	if len(r.Unchecked) > 0 {
		b.WriteString("\n## Not checked\n\n")
		for _, u := range r.Unchecked {
			fmt.Fprintf(&b, "- `%s`: %s (%s)\n", u.Rule, u.Why, pidList(u.PIDs))
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, termsafe.String(b.String()))
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// codeText writes a code reference with its role, share and source:
// "main.worker (main.go:42) contends for the lock, 6% of samples, from stack samples".
func codeText(c CodeRef) string {
	t := c.String() + " " + c.Role
	if c.Share > 0 {
		unit := "of samples"
		switch c.From {
		case "probes":
			unit = "of calls"
		case "goroutine dump":
			unit = "of goroutines"
		}
		t += fmt.Sprintf(", %.0f%% %s", 100*c.Share, unit)
	}
	return t + " (from " + c.From + ")"
}

// escapeText writes the compiler's reason at an allocation site and its
// fix: "escapes: moved to heap: buf (via fmt.Sprintf); fix: ...".
func escapeText(e *EscapeReason) string {
	if e == nil {
		return ""
	}
	via := ""
	if e.Via != "" {
		via = " (in " + e.Via + ", called here)"
	}
	if e.None {
		return "escapes: the compiler reports no escape at this line" + via
	}
	return fmt.Sprintf("escapes: %s%s; fix: %s", e.Reason, via, e.Fix)
}

func evidenceText(l EvidenceList) string {
	parts := make([]string, len(l))
	for i, e := range l {
		v := fmt.Sprint(e.Value)
		if f, ok := e.Value.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e15 {
			v = fmt.Sprintf("%.0f", f)
		}
		parts[i] = strings.TrimSpace(e.Name + " " + v + " " + unitSuffix(e.Unit))
	}
	return strings.Join(parts, ", ")
}

func unitSuffix(u string) string {
	if u == "%" || u == "/s" {
		return strings.TrimSpace(u)
	}
	return u
}

func joinSources(s []Source) string {
	p := make([]string, len(s))
	for i, x := range s {
		p[i] = string(x)
	}
	return strings.Join(p, ", ")
}

func pidList(pids []int) string {
	const show = 8
	var b strings.Builder
	b.WriteString("pid ")
	for i, p := range pids {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(pids)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// severityLine matches the first line of a finding in the text report.
var severityLine = regexp.MustCompile(`(?m)^  (INFO|WARN|CRITICAL)( +)`)

// colourSeverities colours the severity word that starts each finding.
func colourSeverities(text string) string {
	return severityLine.ReplaceAllStringFunc(text, func(m string) string {
		sub := severityLine.FindStringSubmatch(m)
		sev, _ := ParseSeverity(sub[1])
		return "  " + sevColour[sev] + sub[1] + "\x1b[0m" + sub[2]
	})
}
