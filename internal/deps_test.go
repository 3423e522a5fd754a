// Package internal_test holds the layering test of gosleuth's internal
// packages, in the manner of Go's go/build/deps_test.go: the picture in
// docs/design.md (sources -> window -> views) written down, so a change
// that breaks it fails the build.
package internal_test

import (
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
	"internal/window":         "window",
	"internal/export":         "view",
	"internal/web":            "view",
	"internal/compare":        "view",
	"internal/inspect":        "view",
	"internal/syscallsview":   "view",
	"internal/profileview":    "view",
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
		b, _ := os.ReadFile(f)
		readsProc = readsProc || strings.Contains(string(b), `"/proc`)
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
