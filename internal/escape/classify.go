package escape

import (
	"regexp"
	"strings"
)

// Class is a kind of reason a value is on the heap, read from the
// compiler's explanation, with the change that usually avoids it.
type Class string

// The classes of reasons.
const (
	TooLarge        Class = "too large for stack"
	NonConstantSize Class = "non-constant size"
	Closure         Class = "captured by a closure"
	AppendGrowth    Class = "growing append"
	FmtBoxing       Class = "interface boxing in fmt"
	InterfaceBoxing Class = "interface conversion"
	Returned        Class = "returned"
	StoredInHeap    Class = "stored in a heap structure"
	LeakingParam    Class = "leaking parameter"
	OnStack         Class = "kept on the stack"
	OtherEscape     Class = "escapes"
)

// Suggestion is the change that usually avoids an allocation of class c.
func (c Class) Suggestion() string {
	switch c {
	case TooLarge:
		return "allocate it once and reuse it (a field of a long-lived value, or a sync.Pool), or make it smaller"
	case NonConstantSize:
		return "give make a constant size or capacity, or reuse a buffer across calls (sync.Pool)"
	case Closure:
		return "pass the value to the function as an argument instead of capturing it, or create the closure once, not per call"
	case AppendGrowth:
		return "pre-size the slice (make([]T, 0, n)) or reuse it across calls (s = s[:0]): each growth copies into a new array"
	case FmtBoxing:
		return "avoid interface boxing in fmt on the hot path: strconv.Append* into a reused []byte, or a strings.Builder"
	case InterfaceBoxing:
		return "keep the concrete type on the hot path (a typed or generic function) instead of converting to an interface"
	case Returned:
		return "return a value instead of a pointer, or let the caller pass the destination (a buffer to append to)"
	case StoredInHeap:
		return "store values, not pointers: a pointer-free cache (map[K]V of values, or a slice of values indexed by int) saves the allocation and the GC's scan; sync.Pool for short-lived ones"
	case LeakingParam:
		return "the callee keeps what it is given: pass a value, or copy what it keeps"
	case OnStack:
		return "the compiler keeps this value on the stack: the heap allocation on this line comes from a callee or a size known only at run time"
	}
	return "read the compiler's flow: each step is an assignment that carries the value to the heap"
}

// fromTag matches an explanation step "from EXPR (tag) at POS" or "from
// EXPR (tag)".
var fromTag = regexp.MustCompile(`^from (.*) \(([^()]+)\)(?: at (\S+))?$`)

// step is one "from" line of a flow.
type step struct {
	expr, tag string
}

func (f Finding) steps() []step {
	var out []step
	for _, l := range f.Flow {
		if m := fromTag.FindStringSubmatch(l); m != nil {
			out = append(out, step{m[1], m[2]})
		}
	}
	return out
}

// Class reads the reason's class from the compiler's explanation (the
// flow's tags), falling back on the summary line where -m=2 gave none.
func (f Finding) Class() Class {
	c, _ := f.classify()
	return c
}

// Reason is the compiler's summary line with the explanation step that
// decides the class ("i escapes to heap: from fmt.Sprintf(...) (call
// parameter)"), in the compiler's words less the step's position.
func (f Finding) Reason() string {
	_, s := f.classify()
	if m := fromTag.FindStringSubmatch(s); m != nil {
		s = "from " + m[1] + " (" + m[2] + ")"
	}
	if s == "" {
		return f.Message
	}
	return f.Message + ": " + s
}

// Allocation reports a finding about an expression that allocates (make,
// new, &T{...}, a literal, append, a conversion or a concatenation), as
// opposed to a variable or a parameter.
func (f Finding) Allocation() bool {
	return f.Kind != Leaks && allocExpr(f.Subject)
}

func (f Finding) classify() (Class, string) {
	steps := f.steps()
	last := ""
	if len(f.Flow) > 0 {
		last = f.Flow[len(f.Flow)-1]
	}
	find := func(tag string) (string, bool) {
		for _, s := range steps {
			if s.tag == tag {
				return "from " + s.expr + " (" + s.tag + ")", true
			}
		}
		return "", false
	}
	switch f.Kind {
	case NoEscape:
		return OnStack, ""
	case Leaks:
		return LeakingParam, last
	}
	if s, ok := find("too large for stack"); ok {
		return TooLarge, s
	}
	if s, ok := find("non-constant size"); ok {
		return NonConstantSize, s
	}
	if s, ok := find("captured by a closure"); ok {
		return Closure, s
	}
	if f.Subject == "append" || strings.HasPrefix(f.Subject, "append(") {
		return AppendGrowth, last
	}
	for _, s := range steps {
		if s.tag == "call parameter" && strings.Contains(s.expr, "... argument") {
			txt := "from " + s.expr + " (" + s.tag + ")"
			if callee := calleeOf(s.expr); strings.HasPrefix(callee, "fmt.") || strings.HasPrefix(callee, "log.") {
				return FmtBoxing, txt
			}
			return InterfaceBoxing, txt
		}
	}
	if s, ok := find("interface-converted"); ok {
		return InterfaceBoxing, s
	}
	// A value (not an allocation expression) that escapes is the copy
	// made to convert it to an interface.
	if f.Kind == Escapes && !allocExpr(f.Subject) {
		return InterfaceBoxing, last
	}
	if s, ok := find("return"); ok {
		return Returned, s
	}
	for _, l := range f.Flow {
		if strings.HasPrefix(l, "flow: ~r") {
			return Returned, l
		}
	}
	for _, tag := range []string{"key of map put", "value of map put", "assign", "struct literal element", "slice-literal-element", "array-literal-element", "call parameter", "store"} {
		if s, ok := find(tag); ok {
			return StoredInHeap, s
		}
	}
	return OtherEscape, last
}

// allocExpr reports an expression that allocates storage of its own (as
// opposed to a value copied into an interface).
func allocExpr(s string) bool {
	for _, p := range []string{"&", "new(", "make(", "append", "func literal", "[]", "map[", "string(", "([]byte)(", "([]rune)(", "... argument"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	// A string concatenation allocates the result.
	return strings.Contains(s, " + ")
}

// calleeOf returns the function called in a call expression
// ("fmt.Sprintf" in `fmt.Sprintf("%d", ... argument...)`).
func calleeOf(expr string) string {
	if i := strings.IndexByte(expr, '('); i > 0 {
		return expr[:i]
	}
	return ""
}
