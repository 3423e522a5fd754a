// Package escape runs the Go compiler's escape analysis over a module's
// source (go build -gcflags=-m=2, with the Go release the program was built
// with) and parses its diagnostics: which values move to the heap at which
// file:line, the flow the compiler gives as its reason, and a class of that
// reason with the usual change that avoids the allocation.
//
// The reasons are the compiler's own words, kept verbatim; the class and
// the suggested change are drawn from them (the flow's tags such as
// "(too large for stack)", "(captured by a closure)", "(return)", a call
// parameter of fmt), never guessed from the source.
package escape

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Bounds of a parse: the diagnostics are outside bytes (a build's output).
const (
	maxLine     = 64 << 10 // longer lines are cut
	maxFindings = 1 << 20
	maxFlow     = 64 // explanation lines kept per finding
)

// Kind is what the compiler said of a value.
type Kind string

// The kinds of escape diagnostics.
const (
	// MovedToHeap: a variable the compiler allocates on the heap ("moved
	// to heap: x"), at its declaration.
	MovedToHeap Kind = "moved to heap"
	// Escapes: an expression whose storage is allocated on the heap
	// ("&T{...} escapes to heap", "make([]byte, n) escapes to heap",
	// "x escapes to heap" for an interface conversion).
	Escapes Kind = "escapes"
	// Leaks: a parameter whose value (or what it points to) flows to the
	// heap or to a result ("leaking param: p").
	Leaks Kind = "leaks"
	// NoEscape: an allocation expression the compiler keeps on the stack
	// ("make([]byte, n) does not escape").
	NoEscape Kind = "does not escape"
)

// Pos is a position in the source.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col) }

// Finding is one escape diagnostic: the compiler's summary line and the
// flow lines of -m=2 that explain it.
type Finding struct {
	Pos  Pos  `json:"pos"`
	Kind Kind `json:"kind"`
	// Subject is the variable or expression ("x", "&entry{...}",
	// "append", "parameter k").
	Subject string `json:"subject"`
	// Message is the summary line as the compiler wrote it.
	Message string `json:"message"`
	// Func is the function the explanation names ("in put"), where it
	// does; an inlined copy names the function it was inlined into.
	Func string `json:"func,omitempty"`
	// Flow is the explanation, one line a step ("flow: {heap} ← &x:",
	// "from &x (address-of) at ./main.go:22:33"), as the compiler wrote it.
	Flow []string `json:"flow,omitempty"`
}

// Result is the parsed diagnostics of one build.
type Result struct {
	// Dir is the directory relative positions were resolved against (the
	// build's working directory).
	Dir      string    `json:"dir"`
	Findings []Finding `json:"findings"`
	// Truncated says the output was cut at a bound.
	Truncated bool `json:"truncated,omitempty"`
	byLine    map[fileLine][]int
}

type fileLine struct {
	file string
	line int
}

// At returns the findings the compiler reported at file:line (file as
// absolute, or relative to Dir), escaping ones first, in output order.
func (r *Result) At(file string, line int) []Finding {
	if r == nil {
		return nil
	}
	var out []Finding
	for _, i := range r.byLine[fileLine{r.abs(file), line}] {
		out = append(out, r.Findings[i])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind != NoEscape && out[j].Kind == NoEscape })
	return out
}

func (r *Result) abs(file string) string {
	if !filepath.IsAbs(file) && r.Dir != "" {
		file = filepath.Join(r.Dir, file)
	}
	return filepath.Clean(file)
}

// diagLine matches "file.go:line:col: message".
var diagLine = regexp.MustCompile(`^(.+?\.go):(\d+):(\d+): (.*)$`)

// block is an explanation of -m=2 under its header line.
type block struct {
	pos     Pos
	subject string
	fn      string
	flow    []string
}

// ErrNoDiagnostics reports output with no escape diagnostic at all: the
// build ran without -m, or compiled nothing (everything up to date is
// still reported: the go command replays cached compiler output).
var ErrNoDiagnostics = errors.New("no escape diagnostics in the compiler's output")

// Parse reads the output of go build -gcflags=-m=2 (or -m) and returns its
// escape findings, positions made absolute against dir. Lines it does not
// know are skipped; it fails only where no line at all is a diagnostic.
func Parse(r io.Reader, dir string) (*Result, error) {
	res := &Result{Dir: dir, byLine: map[fileLine][]int{}}
	var blocks []*block
	var cur *block
	br := bufio.NewReaderSize(r, 64<<10)
	diags := 0
	for {
		line, err := readLine(br)
		if err != nil && line == "" {
			if err == io.EOF {
				break
			}
			return nil, fmt.Errorf("read compiler output: %w", err)
		}
		m := diagLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ln, err1 := strconv.Atoi(m[2])
		col, err2 := strconv.Atoi(m[3])
		if err1 != nil || err2 != nil || ln <= 0 {
			continue
		}
		diags++
		pos := Pos{File: res.abs(m[1]), Line: ln, Col: col}
		msg := m[4]
		if strings.HasPrefix(msg, " ") {
			// An explanation line of the current block.
			if cur != nil && cur.pos == pos && len(cur.flow) < maxFlow {
				cur.flow = append(cur.flow, strings.TrimSpace(msg))
			}
			continue
		}
		cur = nil
		if b := header(pos, msg); b != nil {
			if len(blocks) < maxFindings {
				blocks = append(blocks, b)
				cur = b
			}
			continue
		}
		f, ok := summary(pos, msg)
		if !ok {
			continue
		}
		if len(res.Findings) >= maxFindings {
			res.Truncated = true
			break
		}
		res.Findings = append(res.Findings, f)
	}
	if diags == 0 {
		return nil, ErrNoDiagnostics
	}
	// Attach each explanation to the summary of the same subject at the
	// same position.
	type key struct {
		pos     Pos
		subject string
	}
	expl := map[key][]*block{}
	for _, b := range blocks {
		k := key{b.pos, b.subject}
		expl[k] = append(expl[k], b)
	}
	for i := range res.Findings {
		f := &res.Findings[i]
		bs := expl[key{f.Pos, f.Subject}]
		if len(bs) == 0 && f.Subject == "append" {
			// "append escapes to heap" is explained under the call
			// ("append(s, x) escapes to heap in f:").
			for _, b := range blocks {
				if b.pos == f.Pos && strings.HasPrefix(b.subject, "append(") {
					bs = append(bs, b)
				}
			}
		}
		for _, b := range bs {
			if f.Func == "" {
				f.Func = b.fn
			}
			for _, l := range b.flow {
				if len(f.Flow) < maxFlow {
					f.Flow = append(f.Flow, l)
				}
			}
		}
		k := fileLine{f.Pos.File, f.Pos.Line}
		res.byLine[k] = append(res.byLine[k], i)
	}
	return res, nil
}

// readLine reads one line without its newline, cutting it at maxLine.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(b) < maxLine {
			b = append(b, chunk[:min(len(chunk), maxLine-len(b))]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		s := strings.TrimRight(string(b), "\r\n")
		if err != nil && err != io.EOF {
			return s, err
		}
		if err == io.EOF && len(b) == 0 {
			return "", io.EOF
		}
		return s, nil
	}
}

// header parses the first line of an explanation: "X escapes to heap in
// F:" or "parameter p leaks to {heap} for F with derefs=0:".
func header(pos Pos, msg string) *block {
	if !strings.HasSuffix(msg, ":") {
		return nil
	}
	body := strings.TrimSuffix(msg, ":")
	if i := strings.LastIndex(body, " escapes to heap in "); i > 0 {
		return &block{pos: pos, subject: body[:i], fn: body[i+len(" escapes to heap in "):]}
	}
	if strings.HasPrefix(body, "parameter ") {
		i := strings.Index(body, " leaks to ")
		j := strings.LastIndex(body, " for ")
		if i > 0 && j > i {
			fn := body[j+len(" for "):]
			if k := strings.Index(fn, " with derefs="); k >= 0 {
				fn = fn[:k]
			}
			return &block{pos: pos, subject: body[:i], fn: fn}
		}
	}
	return nil
}

// summary parses a summary line: "moved to heap: x", "X escapes to heap",
// "leaking param: p", "leaking param content: p", "X does not escape".
func summary(pos Pos, msg string) (Finding, bool) {
	f := Finding{Pos: pos, Message: msg}
	switch {
	case strings.HasPrefix(msg, "moved to heap: "):
		f.Kind, f.Subject = MovedToHeap, strings.TrimPrefix(msg, "moved to heap: ")
	case strings.HasSuffix(msg, " escapes to heap"):
		f.Kind, f.Subject = Escapes, strings.TrimSuffix(msg, " escapes to heap")
	case strings.HasPrefix(msg, "leaking param content: "):
		f.Kind, f.Subject = Leaks, "parameter "+firstWord(strings.TrimPrefix(msg, "leaking param content: "))
	case strings.HasPrefix(msg, "leaking param: "):
		f.Kind, f.Subject = Leaks, "parameter "+firstWord(strings.TrimPrefix(msg, "leaking param: "))
	case strings.HasSuffix(msg, " does not escape"):
		f.Kind, f.Subject = NoEscape, strings.TrimSuffix(msg, " does not escape")
	default:
		return f, false
	}
	if f.Subject == "" {
		return f, false
	}
	return f, true
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}
