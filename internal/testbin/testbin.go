// Package testbin builds the small programs that tests run against the real
// kernel ("patients": one known behaviour each), once per test binary, into a
// directory every user can read (tests also run them as user nobody), and
// removes them when the tests end. It is for tests only.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]result{}
)

type result struct {
	path string
	err  error
}

// Build returns the path of the program in package directory pkg (a path as
// go build takes it, relative to the test's working directory), building it
// on first use. A failed build fails the test, with the compiler's output.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	return BuildWith(t, pkg)
}

// BuildWith is Build with go build flags ("-ldflags=-s -w",
// "-buildmode=pie"): each set of flags is built once.
func BuildWith(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := pkg + "\x00" + strings.Join(flags, "\x00")
	r, ok := built[key]
	if !ok {
		r = build(pkg, flags)
		built[key] = r
	}
	if r.err != nil {
		t.Fatalf("build %s: %v", pkg, r.err)
	}
	return r.path
}

func build(pkg string, flags []string) result {
	if dir == "" {
		d, err := os.MkdirTemp("", "gosleuth-testbin-")
		if err != nil {
			return result{err: err}
		}
		if err := os.Chmod(d, 0o755); err != nil {
			return result{err: err}
		}
		dir = d
	}
	sub, err := os.MkdirTemp(dir, "bin-")
	if err != nil {
		return result{err: err}
	}
	if err := os.Chmod(sub, 0o755); err != nil {
		return result{err: err}
	}
	abs, err := filepath.Abs(pkg)
	if err != nil {
		return result{err: err}
	}
	path := filepath.Join(sub, filepath.Base(abs))
	args := append(append([]string{"build", "-o", path}, flags...), pkg)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return result{err: fmt.Errorf("%w\n%s", err, out)}
	}
	return result{path: path}
}

// Main is a TestMain for packages whose tests build programs: it runs the
// tests, removes what Build made and exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// Cleanup removes every program Build made. Call it from TestMain after
// m.Run (Main does).
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	dir = ""
	clear(built)
}
