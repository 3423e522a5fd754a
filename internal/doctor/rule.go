package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Severity ranks a finding.
type Severity int

// Severities, from least to most urgent.
const (
	Info Severity = iota
	Warn
	Critical
)

var severityNames = [...]string{"info", "warn", "critical"}

func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalJSON writes the severity's name.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// ParseSeverity parses "info", "warn" or "critical".
func ParseSeverity(s string) (Severity, error) {
	for i, n := range severityNames {
		if strings.EqualFold(s, n) {
			return Severity(i), nil
		}
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warn or critical)", s)
}

// Evidence is one named number (or short fact) behind a finding.
type Evidence struct {
	Name  string
	Value any
	// Unit is shown after the value in text ("/s", "%", "MB").
	Unit string
}

// EvidenceList keeps evidence in the order a rule gave it; it is written to
// JSON as an object.
type EvidenceList []Evidence

// MarshalJSON writes the list as a JSON object in order, with units folded
// into the key ("wakeups_per_s").
func (l EvidenceList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(e.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(e.Value)
		if err != nil {
			return nil, fmt.Errorf("evidence %s: %w", e.Name, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Finding is one conclusion about one process.
type Finding struct {
	// ID is the rule's stable id ("idle-wakeups").
	ID       string       `json:"id"`
	Severity Severity     `json:"severity"`
	Title    string       `json:"title"`
	Evidence EvidenceList `json:"evidence"`
	Cause    string       `json:"cause"`
	Fix      string       `json:"fix"`
	// Sources lists the sources the finding rests on.
	Sources []Source `json:"sources"`
	// Confidence is "low", "medium" or "high".
	Confidence string `json:"confidence"`
	// Cores is the CPU (in cores) the problem costs, when it can be put as
	// CPU; 0 otherwise. The host summary adds these up.
	Cores float64 `json:"cpu_cores,omitempty"`
	// Kind is "cause" for a finding that names why (a timer loop, a
	// contended lock, a leak), "symptom" for one that reports only what
	// was seen (kernel time, RSS growth) and that no cause explained.
	Kind string `json:"kind"`
	// Symptoms are the other findings this cause explains: they are not
	// reported again on their own.
	Symptoms []Symptom `json:"symptoms,omitempty"`
	// Code names the code responsible, largest share first.
	Code []CodeRef `json:"code,omitempty"`
	// Observed states what a rule saw without naming a cause, for when the
	// finding becomes a symptom of another ("wakes 15,298 times a second").
	Observed string `json:"-"`
}

// Symptom is a finding explained by a cause, with its own evidence.
type Symptom struct {
	ID       string       `json:"id"`
	Severity Severity     `json:"severity"`
	Observed string       `json:"observed"`
	Evidence EvidenceList `json:"evidence"`
}

// CodeRef is a place in the program responsible for a finding.
type CodeRef struct {
	// Func is the Go function; File and Line the line of the call, when
	// the binary has line tables.
	Func string `json:"func"`
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Role says what the code does there ("waits on the lock").
	Role string `json:"role"`
	// Share is the fraction of the evidence found there (of stack samples,
	// or of probed calls), 0 when not measured.
	Share float64 `json:"share,omitempty"`
	// From names how it was found: "stack samples" or "probes".
	From string `json:"from"`
	// Escape is the compiler's reason what is allocated there lives on
	// the heap, with the usual fix, where JoinEscapes found the
	// program's source; nil elsewhere.
	Escape *EscapeReason `json:"escape,omitempty"`
	// alloc is where the allocation itself happened when that is not
	// the line named (a library function called from it), for the join.
	alloc *window.Site
}

// EscapeReason is the compiler's escape analysis at an allocation site.
type EscapeReason struct {
	// Reason is the compiler's words ("moved to heap: buf"), Class their
	// kind ("returned", "interface", ...), Fix the change that usually
	// keeps the value off the heap.
	Reason string `json:"reason"`
	Class  string `json:"class"`
	Fix    string `json:"fix"`
	// Via is the function the allocation happened in, called from the
	// line, when it is not the line itself.
	Via string `json:"via,omitempty"`
	// None is true where the compiler reported no escape at the line
	// (the value may escape in a function it calls: see Via).
	None bool `json:"none,omitempty"`
}

// String writes the reference as "func (file:line)".
func (c CodeRef) String() string {
	if c.File == "" {
		return c.Func
	}
	return fmt.Sprintf("%s (%s:%d)", c.Func, c.File, c.Line)
}

// Rule is one check in the registry.
type Rule struct {
	// ID is stable: scripts and users rely on it.
	ID string
	// Summary says in a line what the rule looks for.
	Summary string
	// Missing returns "" when the window holds what the rule needs to decide,
	// else what is missing and how to provide it. Nil means the rule can
	// always decide.
	Missing func(w *Window) string
	// Check returns the finding, or nil when there is nothing to report.
	Check func(w *Window, h *Host) *Finding
	// Symptom is true for a rule that reports what it saw without naming a
	// cause (kernel time, RSS growth): a cause found in the same process
	// may explain it.
	Symptom bool
}

// rules is the registry, in id order.
var rules []*Rule

func register(r *Rule) {
	rules = append(rules, r)
	slices.SortFunc(rules, func(a, b *Rule) int { return strings.Compare(a.ID, b.ID) })
}

// Rules returns the registry in id order.
func Rules() []*Rule { return slices.Clone(rules) }

// Unchecked is a rule that could not be decided for a process.
type Unchecked struct {
	PID  int    `json:"pid"`
	Rule string `json:"rule"`
	// Why says what was missing and how to provide it.
	Why string `json:"why"`
}

// notLookedWhy explains a rule left undecided on a process that close looks
// skipped.
const notLookedWhy = "not looked at closely (a whole-host run looks only at the processes /proc flags and busy Go processes; name it with --pid)"

// rootWhy says why a source was missing although gosleuth ran as root:
// what a rule asks for is then not a privilege but something the close
// look could not get.
func rootWhy(w *Window, why string) string {
	need := asRootHint.ReplaceAllString(why, "")
	if w.Exited {
		return need + ": the process exited before its close look"
	}
	if c := w.Cores(); c < barelyRanCores {
		// Sampling found nothing to sample: no failure, so no note.
		return need + fmt.Sprintf(": it barely ran in the window (%.2f%% of a core), too little to sample; nothing here needs it", 100*c)
	}
	return need + ": the close look ran as root but could not get it" + seeNotes
}

// seeNotes ends a reason whose cause is in the report's notes; Diagnose
// drops it where no note speaks of the process.
const seeNotes = " (see the notes)"

// barelyRanCores is the CPU below which a process gives a close look
// nothing to sample (an idle server: 0-2 stack samples in a window).
const barelyRanCores = 0.005

// asRootHint matches the "run as root" advice in a rule's Missing text.
var asRootHint = regexp.MustCompile(` ?\(run as root\)|: run as root.*$`)

// Evaluate runs every rule on w and returns the findings (worst first) and
// the rules it could not decide.
func Evaluate(w *Window, h *Host) (found []Finding, unchecked []Unchecked) {
	for _, r := range rules {
		if r.Missing != nil {
			if why := r.Missing(w); why != "" {
				switch {
				case w.NotLooked:
					why = notLookedWhy
				case h != nil && h.Root && strings.Contains(why, "run as root"):
					why = rootWhy(w, why)
				}
				unchecked = append(unchecked, Unchecked{PID: w.PID, Rule: r.ID, Why: why})
				continue
			}
		}
		if f := r.Check(w, h); f != nil {
			f.ID = r.ID
			if f.Confidence == "" {
				f.Confidence = "medium"
			}
			f.Kind = "cause"
			if r.Symptom {
				f.Kind = "symptom"
			}
			found = append(found, *f)
		}
	}
	found = explain(found)
	slices.SortStableFunc(found, func(a, b Finding) int {
		if c := int(b.Severity - a.Severity); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind) // causes before symptoms
	})
	return found, unchecked
}
