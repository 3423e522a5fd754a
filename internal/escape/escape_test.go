package escape

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// shapes lists the lines of testdata/shapes/main.go that allocate, with
// the class of reason and words of the compiler's summary expected there.
var shapes = []struct {
	line    int
	class   Class
	message string
}{
	{23, FmtBoxing, "i escapes to heap"},
	{28, StoredInHeap, "moved to heap: x"},
	{29, StoredInHeap, "&entry{...} escapes to heap"},
	{36, AppendGrowth, "append escapes to heap"},
	{43, Returned, "&entry{...} escapes to heap"},
	{48, Closure, "moved to heap: c"},
	{54, TooLarge, "moved to heap: a"},
}

// check asserts the findings at each line of the shapes patient.
func check(t *testing.T, r *Result, file string) {
	t.Helper()
	for _, s := range shapes {
		var found bool
		for _, f := range r.At(file, s.line) {
			if f.Message != s.message {
				continue
			}
			found = true
			if f.Class() != s.class {
				t.Errorf("line %d %q: class %q, want %q (flow %q)", s.line, f.Message, f.Class(), s.class, f.Flow)
			}
			if f.Class().Suggestion() == "" || !strings.HasPrefix(f.Reason(), f.Message) {
				t.Errorf("line %d: reason %q, suggestion %q", s.line, f.Reason(), f.Class().Suggestion())
			}
			if f.Kind != NoEscape && len(f.Flow) == 0 {
				t.Errorf("line %d %q: no flow explanation attached", s.line, f.Message)
			}
		}
		if !found {
			t.Errorf("line %d: no finding %q among %+v", s.line, s.message, r.At(file, s.line))
		}
	}
}

// TestEscapeParseShapes parses the compiler's -m=2 output for testdata/shapes
// (captured from go1.26, positions relative to the module's root).
func TestEscapeParseShapes(t *testing.T) {
	b, err := os.ReadFile("testdata/shapes.m2.txt")
	if err != nil {
		t.Fatal(err)
	}
	root := "/src/mod"
	r, err := Parse(bytes.NewReader(b), root)
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, filepath.Join(root, "internal/escape/testdata/shapes/main.go"))
	// The reason names the call that boxes.
	fs := r.At("internal/escape/testdata/shapes/main.go", 23)
	if len(fs) == 0 || !strings.Contains(fs[0].Reason(), "fmt.Sprintf") {
		t.Errorf("fmt boxing reason %q does not name fmt.Sprintf", fs)
	}
	if fs := r.At("internal/escape/testdata/shapes/main.go", 29); len(fs) == 0 || fs[0].Func != "put" {
		t.Errorf("line 29: %+v, want the explanation's function put", fs)
	}
}

// TestEscapeClasses classifies the compiler's words for shapes beyond
// testdata/shapes (captured from go1.26's -m=2).
func TestEscapeClasses(t *testing.T) {
	out := `a.go:48:17: a + "/" + b escapes to heap in concat:
a.go:48:17:   flow: ~r0 ← &{storage for a + "/" + b}:
a.go:48:17:     from a + "/" + b (spill) at a.go:48:17
a.go:48:17:     from return a + "/" + b (return) at a.go:48:2
a.go:48:17: a + "/" + b escapes to heap
a.go:53:16: ([]byte)(s) escapes to heap in toBytes:
a.go:53:16:   flow: ~r0 ← &{storage for ([]byte)(s)}:
a.go:53:16:     from ([]byte)(s) (spill) at a.go:53:16
a.go:53:16:     from return ([]byte)(s) (return) at a.go:53:2
a.go:53:16: ([]byte)(s) escapes to heap
a.go:58:17: point{...} escapes to heap in boxed:
a.go:58:17:   flow: {heap} ← &{storage for point{...}}:
a.go:58:17:     from point{...} (spill) at a.go:58:17
a.go:58:17:     from sinkAny = point{...} (assign) at a.go:58:10
a.go:58:17: point{...} escapes to heap
a.go:63:18: map[int]int{} escapes to heap in index:
a.go:63:18:   flow: m ← &{storage for map[int]int{}}:
a.go:63:18:     from map[int]int{} (spill) at a.go:63:18
a.go:63:18:     from m := map[int]int{} (assign) at a.go:63:4
a.go:63:18:   flow: ~r0 ← m:
a.go:63:18:     from return m (return) at a.go:67:2
a.go:63:18: map[int]int{} escapes to heap
a.go:41:11: make([]byte, n) does not escape
a.go:27:10: leaking param: k
`
	r, err := Parse(strings.NewReader(out), "/m")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		line  int
		class Class
	}{{48, Returned}, {53, Returned}, {58, InterfaceBoxing}, {63, Returned}, {41, OnStack}, {27, LeakingParam}} {
		fs := r.At("a.go", tt.line)
		if len(fs) != 1 || fs[0].Class() != tt.class {
			t.Errorf("line %d: %+v, want one finding of class %q", tt.line, fs, tt.class)
		}
	}
}

func TestEscapeParseBadInput(t *testing.T) {
	tests := []struct {
		name, in string
		want     error
		findings int
	}{
		{"empty", "", ErrNoDiagnostics, 0},
		{"not diagnostics", "hello\nworld\n", ErrNoDiagnostics, 0},
		{"zero line", "a.go:0:1: moved to heap: x\n", ErrNoDiagnostics, 0},
		{"flow without header", "a.go:3:1:   flow: {heap} ← x:\na.go:3:1: x escapes to heap\n", nil, 1},
		{"header without summary", "a.go:3:1: x escapes to heap in f:\n", nil, 0},
		{"empty subject", "a.go:3:1: moved to heap: \n", nil, 0},
		{"long line", "a.go:3:1: moved to heap: " + strings.Repeat("x", 200<<10) + "\n", nil, 1},
		{"no newline", "a.go:3:1: leaking param: p", nil, 1},
		{"crlf", "a.go:3:1: moved to heap: x\r\n", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(strings.NewReader(tt.in), "/d")
			if !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			if err == nil && len(r.Findings) != tt.findings {
				t.Errorf("%d findings, want %d: %+v", len(r.Findings), tt.findings, r.Findings)
			}
			if err == nil {
				for _, f := range r.Findings {
					if len(f.Message) > maxLine || f.Subject == "" {
						t.Errorf("finding %.80q", f.Message)
					}
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	b, err := os.ReadFile("testdata/shapes.m2.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(b))
	f.Add("a.go:1:1: x escapes to heap in f:\na.go:1:1:   flow: {heap} ← &x:\na.go:1:1:     from x (too large for stack) at a.go:1:1\na.go:1:1: moved to heap: x\n")
	f.Add("a.go:1:1: parameter p leaks to {heap} for f with derefs=0:\na.go:1:1: leaking param content: p\n")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(strings.NewReader(s), "/d")
		if err != nil {
			return
		}
		for _, f := range r.Findings {
			_ = f.Class().Suggestion()
			_ = f.Reason()
			if !filepath.IsAbs(f.Pos.File) || f.Pos.Line <= 0 || len(f.Flow) > maxFlow {
				t.Fatalf("finding %+v", f)
			}
			if len(r.At(f.Pos.File, f.Pos.Line)) == 0 {
				t.Fatalf("At(%s, %d) misses its finding", f.Pos.File, f.Pos.Line)
			}
		}
	})
}

func TestEscapeFindModule(t *testing.T) {
	m, err := FindModule("testdata/shapes")
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != "github.com/gosleuth/gosleuth" || !filepath.IsAbs(m.Root) {
		t.Errorf("module %+v", m)
	}
	if _, err := FindModule("/"); err == nil || !strings.Contains(err.Error(), "no go.mod") {
		t.Errorf("err %v, want no go.mod", err)
	}
}

// TestEscapeRunShapes runs the compiler of this test's own release on the
// shapes patient and finds every reason at its line.
func TestEscapeRunShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	r, mod, err := Run(context.Background(), Options{Dir: "testdata/shapes", GoVersion: runtime.Version()})
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("testdata/shapes/main.go")
	if !strings.HasPrefix(abs, mod.Root) {
		t.Errorf("module root %s does not hold %s", mod.Root, abs)
	}
	check(t, r, abs)
}

// TestEscapeRunGCFlags: the program's own compiler flags are applied (-l,
// inlining off, changes no reason in the shapes patient, whose functions
// are go:noinline), with or without a package pattern.
func TestEscapeRunGCFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	for _, g := range []string{"-l", "all=-l"} {
		r, _, err := Run(context.Background(), Options{Dir: "testdata/shapes", GCFlags: g})
		if err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs("testdata/shapes/main.go")
		check(t, r, abs)
	}
	if _, _, err := Run(context.Background(), Options{Dir: "testdata/shapes", GCFlags: "-no-such-flag"}); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("a bad compiler flag: err %v, want one line", err)
	}
}

// TestEscapeRunWrongToolchain: a release that cannot be had fails in one
// line.
func TestEscapeRunWrongToolchain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	t.Setenv("GOPROXY", "off")
	_, _, err := Run(context.Background(), Options{Dir: "testdata/shapes", GoVersion: "go1.99.1"})
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "go1.99.1") {
		t.Errorf("err %q, want one line naming go1.99.1", err)
	}
	t.Log(err)
}
