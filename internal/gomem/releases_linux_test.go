//go:build linux

package gomem

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// buildCensus builds testdata/census with toolchain, in a module of its
// own (go 1.20, so every toolchain takes it), stripped or not, as PIE or
// with cgo, and returns the executable.
func buildCensus(t *testing.T, toolchain string, stripped, pie, cgo bool) string {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64, testenv.GoToolchains)
	if cgo {
		testenv.Require(t, testenv.GCC)
	}
	dir := t.TempDir()
	for _, f := range []string{"main.go", "cgo.go"} {
		b, err := os.ReadFile(filepath.Join("testdata", "census", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gosleuth.test/census\n\ngo 1.20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	env := append(os.Environ(), "GOTOOLCHAIN="+toolchain, "GOWORK=off", "GOFLAGS=-buildvcs=false", cgoEnv)
	exe := filepath.Join(dir, "census")
	args := []string{"build", "-o", exe}
	if stripped {
		args = append(args, "-ldflags=-s -w")
	}
	if pie {
		args = append(args, "-buildmode=pie")
	}
	if cgo {
		args = append(args, "-tags=censuscgo")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("toolchain")) {
			testenv.Missing(t, testenv.GoToolchains, fmt.Sprintf("build with %s: %v: %s", toolchain, err, out))
		}
		t.Fatalf("build the census patient with %s: %v\n%s", toolchain, err, out)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// runCensus starts exe and returns its PID and pprof address (its first
// line).
func runCensus(t *testing.T, exe string) (int, string) {
	t.Helper()
	p := testbin.Start(t, exec.Command(exe), testbin.Options{Wait: 60 * time.Second})
	return p.PID(), p.Ready()
}

// debug2States parses a goroutine dump (debug=2) into counts by the
// innermost main.* function and the state printed in each goroutine's
// header (its wait reason, as the runtime names it).
func debug2States(b []byte) map[string]int {
	out := map[string]int{}
	head := regexp.MustCompile(`^goroutine \d+ \[([^\],]+)`)
	state, done := "", true
	for _, l := range strings.Split(string(b), "\n") {
		if m := head.FindStringSubmatch(l); m != nil {
			state, done = m[1], false
			continue
		}
		if !done && strings.HasPrefix(l, "main.") {
			fn := l
			if i := strings.LastIndexByte(fn, '('); i > 0 {
				fn = fn[:i]
			}
			out[fn+" ["+state+"]"]++
			done = true
		}
	}
	return out
}

// TestReleases builds the census patient with Go releases the tables cover
// (the oldest and the newest; every one with GOMEM_RELEASES=all), stripped
// (no symbol table, no DWARF: the layout from the tables, the variables
// from the runtime's code), and with the newest also as stripped PIE with
// cgo, and compares what is read from memory
// with what each program says of itself at the same moment: goroutines by
// innermost main function and wait reason against its own goroutine dump,
// the heap profile's patient stacks against its /debug/pprof/heap, GC
// cycles and the heap goal against runtime/metrics.
func TestReleases(t *testing.T) {
	type build struct {
		toolchain       string
		pie, cgo, dwarf bool
	}
	// Every release takes about a minute to build (its standard library
	// and net/http compiled afresh): the suite builds the oldest and the
	// newest, and the newest as PIE with cgo; GOMEM_RELEASES=all builds
	// every release (bench/runtime-books/releases.sh).
	releases := []string{tabledReleases[0], tabledReleases[len(tabledReleases)-1]}
	if os.Getenv("GOMEM_RELEASES") == "all" {
		releases = tabledReleases
	}
	var builds []build
	for _, r := range releases {
		builds = append(builds, build{toolchain: newestPatch(t, r)})
	}
	newest := newestPatch(t, tabledReleases[len(tabledReleases)-1])
	builds = append(builds, build{toolchain: newest, pie: true, cgo: true})
	for _, b := range builds {
		name := b.toolchain + "-stripped"
		if b.pie {
			name += "-pie"
		}
		if b.cgo {
			name += "-cgo"
		}
		t.Run(name, func(t *testing.T) {
			exe := buildCensus(t, b.toolchain, true, b.pie, b.cgo)
			pid, addr := runCensus(t, exe)
			p, err := Open(proc.FS{}, pid)
			if err != nil {
				t.Fatal(err)
			}
			if p.Layout.From != "table" {
				t.Errorf("layout from %s, want the tables (the binary has no DWARF)", p.Layout.From)
			}
			// Every variable is found from code: this patient links
			// net/http/pprof, so runtime.disableMemoryProfiling is
			// zero and lies in .noptrbss, not where the linker sets it.
			if p.Located != "runtime code (stripped binary)" {
				t.Errorf("variables located from %s, want all from the runtime's code", p.Located)
			}
			c, err := p.Census(CensusOptions{})
			if err != nil {
				t.Fatal(err)
			}
			theirs := debug2States(testbin.Fetch(t, "http://"+addr+"/debug/pprof/goroutine?debug=2"))
			ours := map[string]int{}
			for _, s := range c.Stacks {
				for _, f := range s.Frames {
					if strings.HasPrefix(f.Func, "main.") {
						ours[f.Func+" ["+s.State+"]"] += s.Count
						break
					}
				}
			}
			for _, fn := range []string{"main.receiver", "main.sleeper", "main.selecter", "main.locker"} {
				found := false
				for k, n := range theirs {
					if !strings.HasPrefix(k, fn+" [") {
						continue
					}
					found = true
					if ours[k] != n {
						t.Errorf("%s: read %d, the program's dump says %d", k, ours[k], n)
					}
				}
				if !found {
					t.Errorf("%s not in the program's own dump: %v", fn, theirs)
				}
			}
			// The dump just taken allocates in the patient, which may
			// start a GC cycle: the statistics are compared within one.
			var (
				st *Stats
				m  map[string]uint64
			)
			for try := 0; try < 3; try++ {
				if st, err = p.Stats(); err != nil {
					t.Fatal(err)
				}
				if m = rtm(t, addr); uint64(st.GCCycles) == m["/gc/cycles/total:gc-cycles"] {
					break
				}
			}
			if uint64(st.GCCycles) != m["/gc/cycles/total:gc-cycles"] {
				t.Errorf("GC cycles: read %d, runtime/metrics %d", st.GCCycles, m["/gc/cycles/total:gc-cycles"])
			}
			if st.HeapGoal != m["/gc/heap/goal:bytes"] {
				t.Errorf("heap goal: read %d, runtime/metrics %d", st.HeapGoal, m["/gc/heap/goal:bytes"])
			}
			if live, ok := m["/gc/heap/live:bytes"]; ok && st.HeapMarked != live {
				t.Errorf("heap live: read %d, runtime/metrics %d", st.HeapMarked, live)
			}
			h, err := p.HeapProfile()
			if err != nil {
				t.Fatal(err)
			}
			prof, err := profile.ParseData(testbin.Fetch(t, "http://"+addr+"/debug/pprof/heap"))
			if err != nil {
				t.Fatal(err)
			}
			a, bb := sumByStack(p.Pprof(h)), sumByStack(prof)
			n := 0
			for k, v := range bb {
				if strings.Contains(k, "main.fill") || strings.Contains(k, "main.churn") {
					n++
					if a[k] != v {
						t.Errorf("heap stack %s: read %v, the program's profile %v", k, a[k], v)
					}
				}
			}
			if n == 0 {
				t.Errorf("no main.fill or main.churn stack in the program's heap profile")
			}
		})
	}
}

// newestPatch is the newest patch of release the tests know of.
func newestPatch(t *testing.T, release string) string {
	v, ok := newestPatches[release]
	if !ok {
		t.Fatalf("no known patch of %s", release)
	}
	return v
}

// sumByStack sums a profile's values by stack of function names.
func sumByStack(pr *profile.Profile) map[string][4]int64 {
	out := map[string][4]int64{}
	for _, s := range pr.Sample {
		k := stackKey(s)
		v := out[k]
		for i := range v {
			v[i] += s.Value[i]
		}
		out[k] = v
	}
	return out
}

// newestPatches is the newest patch of each tabled release, as the layout
// tables were built (layouts_gen.go).
var newestPatches = map[string]string{
	"go1.20": "go1.20.14", "go1.21": "go1.21.13", "go1.22": "go1.22.12", "go1.23": "go1.23.12",
	"go1.24": "go1.24.13", "go1.25": "go1.25.14", "go1.26": "go1.26.11", "go1.27": "go1.27.4",
}
