// Package internal_test holds the layering test of gosleuth's internal
// packages, in the manner of Go's go/build/deps_test.go: the picture in
// docs/design.md (sources -> window -> views) written down, so a change
// that breaks it fails the build.
package internal_test

import (
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
