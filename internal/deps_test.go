// Package internal_test holds the layering test of gosleuth's internal
// packages, in the manner of Go's go/build/deps_test.go: the picture in
// docs/design.md (sources -> window -> views) written down, so a change
// that breaks it fails the build.
package internal_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gosleuth/gosleuth/"

// layer of each package under internal/: sources read the kernel and the
// processes, views turn what sources saw into output. Helpers are used by
// all. A package missing here fails the test: say where a new one belongs.
var layer = map[string]string{
	"internal/tracefs":        "helper",
	"internal/termsafe":       "helper",
	"internal/atomicfile":     "helper",
	"internal/units":          "helper",
	"internal/svgplot":        "helper",
	"internal/testbin":        "test",
	"internal/testenv":        "test",
	"internal/golden":         "test",
	"internal/proc":           "source",
	"internal/perf":           "source",
	"internal/syscalls":       "source",
	"internal/stacks":         "source",
	"internal/goruntime":      "source",
	"internal/goruntime/wire": "source",
	"internal/load":           "view", // the generator drives; its target watch reads windows
	"internal/doctor":         "view",
	"internal/top":            "view",
	"internal/probe":          "source",
	"internal/gomem":          "source", // reads a Go process's runtime structures from its memory
	"internal/window":         "window",
	"internal/export":         "view",
	"internal/web":            "view",
	"internal/compare":        "view",
	"internal/inspect":        "view",
	"internal/syscallsview":   "view",
	"internal/profileview":    "view",
	"internal/escape":         "source", // runs the compiler's escape analysis over a module's source
	"internal/allocview":      "view",
}

// may says which layers a layer may import.
var may = map[string][]string{
	"helper": {"helper"},
	"test":   {"helper", "test"},
	"source": {"helper", "source"},
	"window": {"helper", "source", "window"},
	"view":   {"helper", "source", "window", "view"},
}

// procReaders are the packages that still open /proc paths themselves:
// internal/proc should be the only door (docs/design.md). The list may
// only shrink; a package that starts reading /proc fails here.
var procReaders = []string{
	"internal/proc",
	"internal/inspect", // its report names /proc in its output
	"cmd/gosleuth",     // flag defaults
}

// procFileReaders are the files outside internal/proc that still open proc
// paths themselves, though built by a proc.FS (so --proc reaches them): the
// list may only shrink, and a file that starts reading proc paths fails
// TestLayers.
var procFileReaders = []string{
	"internal/goruntime/agentsrc.go",       // the agent's socket, under the target's root
	"internal/goruntime/cgroup.go",         // cgroup and mountinfo, the limits under /proc/PID/root
	"internal/goruntime/facts.go",          // status, exe, environ
	"internal/goruntime/maxprocs_linux.go", // maps, for the load bias
	"internal/stacks/sampler_linux.go",     // maps, re-read as the target maps code
	"internal/gomem/process.go",            // exe and the target's root
}

// counterSubtractors are the packages that may subtract counters
// (proc.Delta): proc, which reads them, and window, which turns readings
// into intervals for every view (docs/design.md). deltaFiles are the files
// elsewhere that still do: none, and the list may only stay empty.
var counterSubtractors = []string{"internal/proc", "internal/window"}

var deltaFiles = []string{}

// procLiteral reports whether the Go file f holds a string literal naming
// a /proc path anywhere but in the text of a message (fmt's printing and
// error functions), where a path names a source for the reader, or as
// gosleuth's own binary (/proc/self/exe), which it starts again.
func procLiteral(t *testing.T, f string) bool {
	af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
	if err != nil {
		t.Errorf("%s: %v", f, err)
		return false
	}
	inMessage := map[*ast.BasicLit]bool{}
	found := false
	ast.Inspect(af, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				id, ok := sel.X.(*ast.Ident)
				// A message's text names /proc without reading a
				// process through it.
				if ok && id.Name == "fmt" && len(n.Args) > 0 {
					for _, a := range n.Args {
						if lit, ok := a.(*ast.BasicLit); ok {
							inMessage[lit] = true
						}
					}
				}
			}
		case *ast.BasicLit:
			// "/proc/self/exe" is gosleuth's own executable, started
			// again (a releaser, a guard): no watched process's state.
			if n.Kind == token.STRING && strings.HasPrefix(n.Value, `"/proc`) && n.Value != `"/proc/self/exe"` && !inMessage[n] {
				found = true
			}
		}
		return true
	})
	return found
}

// procDeltas returns the places in the Go file f (src, when not nil, is
// its text) that call proc.Delta, under whatever name the file imports
// internal/proc.
func procDeltas(t *testing.T, f string, src any) []string {
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, f, src, 0)
	if err != nil {
		t.Errorf("%s: %v", f, err)
		return nil
	}
	name := ""
	for _, im := range af.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == module+"internal/proc" {
			name = "proc"
			if im.Name != nil {
				name = im.Name.Name
			}
		}
	}
	var out []string
	ast.Inspect(af, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Delta" {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
				out = append(out, fset.Position(sel.Pos()).String())
			}
		}
		return true
	})
	return out
}

// TestProcDeltas: the counter check finds proc.Delta however proc is
// imported, and nothing else.
func TestProcDeltas(t *testing.T) {
	for _, tc := range []struct {
		name, imp, body string
		found           int
	}{
		{"a subtraction", `"` + module + `internal/proc"`, `_ = proc.Delta(a, b)`, 1},
		{"under another name", `p "` + module + `internal/proc"`, `_ = p.Delta(a, b) + p.Delta(b, a)`, 2},
		{"a window's", `"` + module + `internal/window"`, `_ = window.Between(x, y)`, 0},
		{"another package's Delta", `proc "example.com/proc"`, `_ = proc.Delta(a, b)`, 0},
	} {
		src := "package p\nimport " + tc.imp + "\nfunc f() {\n" + tc.body + "\n}\n"
		if got := procDeltas(t, "x.go", src); len(got) != tc.found {
			t.Errorf("%s: found %v, want %d", tc.name, got, tc.found)
		}
	}
}

// fileAccess are the functions that open, list or resolve a path.
var fileAccess = map[string][]string{
	"os":     {"ReadFile", "Open", "OpenFile", "ReadDir", "Readlink", "Stat", "Lstat", "DirFS"},
	"unix":   {"Open", "Openat", "Readlink", "Stat", "Lstat", "Getdents"},
	"ioutil": {"ReadFile", "ReadDir"},
}

// procNames are names under a proc mount; a path built from one, or from a
// variable called like a proc root, is a proc path however it is joined.
var procNames = []string{"/proc", "self", "task", "fd", "fdinfo", "net/tcp", "net/tcp6", "net/udp", "net/unix",
	"stat", "status", "statm", "schedstat", "io", "cmdline", "comm", "maps", "smaps", "smaps_rollup", "limits",
	"cgroup", "mountinfo", "environ", "wchan", "syscall", "children", "loadavg", "meminfo", "pressure"}

// procRootName matches identifiers that hold a proc mount or a path below
// one (procRoot, ProcRoot, fdDir, taskDir, procPath, ...), and the
// proc.FS methods that build paths (fs.PID(pid, "maps"), fs.Path("net")).
func procRootName(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "procroot") || strings.HasPrefix(n, "proc") ||
		strings.HasPrefix(n, "fddir") || strings.HasPrefix(n, "taskdir") || name == "PID"
}

// procFileAccess returns the places in the Go file f where a file is
// opened, listed or resolved at a path built from proc names: a literal
// such as "/proc/self/stat" or "net/tcp", or a variable named like a proc
// root (filepath.Join(root, pid, "fd")), directly or through a local
// variable assigned from such a path.
func procFileAccess(t *testing.T, f string, src any) []string {
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, f, src, 0)
	if err != nil {
		t.Errorf("%s: %v", f, err)
		return nil
	}
	// Local variables assigned from a proc path are proc paths too.
	tainted := map[string]bool{}
	var procExpr func(e ast.Expr) bool
	procExpr = func(e ast.Expr) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if v, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING {
					for _, name := range procNames {
						if v == name || strings.HasPrefix(v, "/proc/") || v == "/proc" || strings.HasPrefix(v, name+"/") && strings.Contains(name, "/") {
							found = true
						}
					}
				}
			case *ast.Ident:
				found = found || procRootName(n.Name) || tainted[n.Name]
			case *ast.SelectorExpr:
				found = found || procRootName(n.Sel.Name)
				if id, ok := n.X.(*ast.Ident); ok && (id.Name == "os" || id.Name == "filepath" || id.Name == "path") {
					return false
				}
			}
			return !found
		})
		return found
	}
	ast.Inspect(af, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && i < len(n.Rhs) && procExpr(n.Rhs[i]) {
					tainted[id.Name] = true
				}
			}
		case *ast.RangeStmt:
			// for _, f := range []string{"net/tcp", "net/tcp6"}
			if id, ok := n.Value.(*ast.Ident); ok && procExpr(n.X) {
				tainted[id.Name] = true
			}
		}
		return true
	})
	var out []string
	ast.Inspect(af, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok || !slices.Contains(fileAccess[pkg.Name], sel.Sel.Name) {
			return true
		}
		arg := call.Args[0]
		if pkg.Name == "unix" && sel.Sel.Name == "Openat" && len(call.Args) > 1 {
			arg = call.Args[1]
		}
		if procExpr(arg) {
			out = append(out, fmt.Sprintf("%s: %s.%s", fset.Position(call.Pos()), pkg.Name, sel.Sel.Name))
		}
		return true
	})
	return out
}

// TestProcFileAccess: the file access check finds proc paths however they
// are built (a root and names joined, a variable holding such a path, a
// range over names), and leaves other file systems alone.
func TestProcFileAccess(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		leaks      int
	}{
		{"a listener's owner found by hand (load's FindListener before it moved to proc)", `
			for _, f := range []string{"net/tcp", "net/tcp6"} {
				b, _ := os.ReadFile(filepath.Join(root, f))
				_ = b
			}
			fdDir := filepath.Join(root, name, "fd")
			fds, _ := os.ReadDir(fdDir)
			for _, fd := range fds {
				os.Readlink(filepath.Join(fdDir, fd.Name()))
			}`, 3},
		{"a literal path", `os.ReadFile("/proc/self/status")`, 1},
		{"a proc root flag", `os.Open(filepath.Join(procRoot, "loadavg"))`, 1},
		{"a path from proc.FS", `os.Open(fs.PID(pid, "maps"))`, 1},
		{"tracefs", `os.ReadFile(filepath.Join(root, "events", group, name, "id"))`, 0},
		{"a cgroup file", `os.ReadFile(filepath.Join(base, "cpu.max"))`, 0},
		{"through proc.FS", `fs.ListenerPID(port)`, 0},
	} {
		src := "package p\nfunc f() {\n" + tc.body + "\n}\n"
		if got := procFileAccess(t, "x.go", src); len(got) != tc.leaks {
			t.Errorf("%s: found %d proc reads %v, want %d", tc.name, len(got), got, tc.leaks)
		}
	}
}

func TestLayers(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"internal", "cmd", "agent", "hedge"} {
		filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			pkg, _ := filepath.Rel(root, path)
			checkPackage(t, path, pkg)
			return nil
		})
	}
}

func checkPackage(t *testing.T, dir, pkg string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var imports []string
	readsProc := false
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, module) {
				imports = append(imports, strings.TrimPrefix(p, module))
			}
		}
		readsProc = readsProc || procLiteral(t, f)
		rel := filepath.Join(pkg, filepath.Base(f))
		if !slices.Contains(counterSubtractors, pkg) && !slices.Contains(deltaFiles, rel) {
			for _, d := range procDeltas(t, f, nil) {
				t.Errorf("%s: %s subtracts counters itself: take a window (window.Builder, Between, StepOf) instead", pkg, d)
			}
		}
		if !slices.Contains(procReaders, pkg) && !slices.Contains(procFileReaders, rel) {
			for _, leak := range procFileAccess(t, f, nil) {
				t.Errorf("%s: %s reads a proc path itself: go through internal/proc (proc.FS, with its --proc root)", pkg, leak)
			}
		}
	}
	if len(files) == 0 {
		return
	}
	if readsProc && !slices.Contains(procReaders, pkg) {
		t.Errorf("%s opens /proc paths itself: go through internal/proc (the one door, with its --proc root)", pkg)
	}
	if !strings.HasPrefix(pkg, "internal/") {
		return // cmd, agent and hedge are the outside: they may use anything below
	}
	l, ok := layer[pkg]
	if !ok {
		t.Errorf("%s has no layer: add it to the table in deps_test.go", pkg)
		return
	}
	for _, im := range imports {
		if strings.HasPrefix(im, "cmd/") {
			t.Errorf("%s imports %s: nothing below cmd may", pkg, im)
			continue
		}
		il, ok := layer[im]
		if !ok {
			continue // agent, hedge: public libraries
		}
		if !slices.Contains(may[l], il) {
			t.Errorf("%s (a %s) imports %s (a %s): sources never import views", pkg, l, im, il)
		}
	}
}

// TestTimingListed: every test that calls testenv.Timing (skipped under the
// race detector) is named in .ci/run's timing step, which runs them without
// -race, and that step names no other test: a timing test left off the list
// would run nowhere.
func TestTimingListed(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs, tests []string
	for _, line := range strings.Split(string(ci), "\n") {
		if v, ok := strings.CutPrefix(line, "timing_pkgs="); ok {
			for _, p := range strings.Fields(strings.Trim(v, `"`)) {
				pkgs = append(pkgs, strings.TrimPrefix(p, "./"))
			}
		}
		if v, ok := strings.CutPrefix(line, "timing_tests="); ok {
			v = strings.TrimSuffix(strings.TrimPrefix(strings.Trim(v, `'`), "^("), ")$")
			tests = strings.Split(v, "|")
		}
	}
	if len(pkgs) == 0 || len(tests) == 0 {
		t.Fatal(".ci/run has no timing_pkgs= and timing_tests= lines")
	}
	found := map[string]string{} // test name -> package
	for _, dir := range []string{"internal", "cmd", "agent", "hedge"} {
		filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			af, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			pkg, _ := filepath.Rel(root, filepath.Dir(path))
			for _, decl := range af.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Timing" {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "testenv" {
							found[fn.Name.Name] = pkg
						}
					}
					return true
				})
			}
			return nil
		})
	}
	for name, pkg := range found {
		if !slices.Contains(tests, name) || !slices.Contains(pkgs, pkg) {
			t.Errorf("%s in %s calls testenv.Timing but .ci/run's timing step does not run it", name, pkg)
		}
	}
	for _, name := range tests {
		if _, ok := found[name]; !ok {
			t.Errorf(".ci/run's timing step names %s, which does not call testenv.Timing", name)
		}
	}
}
