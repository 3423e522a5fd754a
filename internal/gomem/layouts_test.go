package gomem

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"go/format"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// tabledReleases are the Go releases with layout tables. To add one, add
// it here and run the generator (see TestLayoutTables).
var tabledReleases = []string{"go1.20", "go1.21", "go1.22", "go1.23", "go1.24", "go1.25", "go1.26", "go1.27"}

// patchVersion spells patch p of release as the toolchain names it: Go
// 1.20 and before named the first release without ".0".
func patchVersion(release string, p int) string {
	if p == 0 && number(strings.TrimPrefix(release, "go1.")) <= 20 {
		return release
	}
	return fmt.Sprintf("%s.%d", release, p)
}

// tabledNewest is the newest patch of release that the tables cover
// ("go1.26.11"), "" for a release without a table.
func tabledNewest(release string) string {
	newest := -1
	for _, r := range tables {
		if r.release == release {
			newest = max(newest, r.last)
		}
	}
	if newest < 0 {
		return ""
	}
	return patchVersion(release, newest)
}

// refBuild says how to build a program under testdata.
type refBuild struct {
	prog      string // the directory under testdata; "" is "ref"
	toolchain string // "go1.22.12", fetched through the module proxy
	stripped  bool   // -ldflags=-s -w: no symbol table, no DWARF
	pie       bool   // -buildmode=pie
	cgo       bool   // with a C file, linked with the C runtime
	noinline  bool   // -gcflags=all=-l: the runtime's helpers stay calls
}

func (b refBuild) String() string {
	s := b.toolchain
	if b.prog != "" {
		s = b.prog + "-" + s
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{b.stripped, "stripped"}, {b.pie, "pie"}, {b.cgo, "cgo"}, {b.noinline, "noinline"}} {
		if f.on {
			s += "-" + f.name
		}
	}
	return s
}

// buildRef builds the program testdata/PROG (the reference program
// testdata/ref unless b names another) with b's toolchain, in a temporary
// module of its own (go 1.20, so every toolchain takes it), and returns
// the executable's path. A cgo build adds the build tag PROG+"cgo". A
// toolchain that cannot be fetched skips the test, or fails it where
// testenv requires toolchains.
func buildRef(t testing.TB, b refBuild) string {
	t.Helper()
	prog := b.prog
	if prog == "" {
		prog = "ref"
	}
	testenv.Require(t, testenv.GoToolchains)
	if b.cgo {
		testenv.Require(t, testenv.Linux, testenv.AMD64, testenv.GCC)
	}
	dir := t.TempDir()
	srcs, err := filepath.Glob(filepath.Join("testdata", prog, "*.go"))
	if err != nil || len(srcs) == 0 {
		t.Fatalf("program testdata/%s: %v (%d files)", prog, err, len(srcs))
	}
	for _, src := range srcs {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module gosleuth.test/"+prog+"\n\ngo 1.20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgo := "0"
	if b.cgo {
		cgo = "1"
	}
	env := append(os.Environ(), "GOTOOLCHAIN="+b.toolchain, "GOWORK=off", "GOFLAGS=-buildvcs=false",
		"GOOS=linux", "GOARCH=amd64", "GOAMD64=v1", "CGO_ENABLED="+cgo)
	ver := exec.Command("go", "version")
	ver.Dir, ver.Env = dir, env
	if out, err := ver.CombinedOutput(); err != nil || !strings.Contains(string(out), b.toolchain+" ") {
		testenv.Missing(t, testenv.GoToolchains, fmt.Sprintf("GOTOOLCHAIN=%s go version: %v: %s", b.toolchain, err, bytes.TrimSpace(out)))
	}
	exe := filepath.Join(dir, prog)
	args := []string{"build", "-trimpath", "-o", exe}
	if b.stripped {
		args = append(args, "-ldflags=-s -w")
	}
	if b.pie {
		args = append(args, "-buildmode=pie")
	}
	if b.cgo {
		args = append(args, "-tags="+prog+"cgo")
	}
	if b.noinline {
		args = append(args, "-gcflags=all=-l")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/%s (%s): %v\n%s", prog, b, err, out)
	}
	return exe
}

// refLayout reads the layout of the runtime in exe as the generator
// tables it: offsets and sizes from its DWARF, wait reasons from its data.
func refLayout(exe, minor string) (*Layout, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	l, err := layoutFromDWARF(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	l.Go, l.From = minor, "table"
	if l.WaitReasons, err = waitReasonNames(f); err != nil {
		return nil, fmt.Errorf("%s: %w", exe, err)
	}
	return l, nil
}

// waitReasonNames reads runtime.waitReasonStrings, an array of strings
// indexed by the runtime's waitReason constants, from the static data of
// a (non-PIE) executable with a symbol table.
func waitReasonNames(f *elf.File) ([]string, error) {
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("symbols: %w", err)
	}
	i := slices.IndexFunc(syms, func(s elf.Symbol) bool { return s.Name == "runtime.waitReasonStrings" })
	if i < 0 {
		return nil, errors.New("no symbol runtime.waitReasonStrings")
	}
	arr, err := readVaddr(f, syms[i].Value, syms[i].Size)
	if err != nil || len(arr)%16 != 0 || len(arr) == 0 {
		return nil, fmt.Errorf("runtime.waitReasonStrings (%d bytes): %v", len(arr), err)
	}
	var names []string
	for o := 0; o < len(arr); o += 16 {
		p, n := binary.LittleEndian.Uint64(arr[o:]), binary.LittleEndian.Uint64(arr[o+8:])
		if n == 0 {
			names = append(names, "")
			continue
		}
		s, err := readVaddr(f, p, n)
		if err != nil {
			return nil, fmt.Errorf("wait reason %d: %w", o/16, err)
		}
		names = append(names, string(s))
	}
	return names, nil
}

// readVaddr reads n bytes at link-time address a from f's loaded segments.
func readVaddr(f *elf.File, a, n uint64) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && a >= p.Vaddr && a+n <= p.Vaddr+p.Filesz {
			b := make([]byte, n)
			_, err := p.ReadAt(b, int64(a-p.Vaddr))
			return b, err
		}
	}
	return nil, fmt.Errorf("%#x+%d is in no loaded segment's file bytes", a, n)
}

// TestLayoutTables builds the reference program with the last patch of
// every run of patches the tables hold and checks each table against what
// that binary says. It is also the generator:
//
//	GOMEM_GENERATE=1 go test -count=1 -timeout=1h -run '^TestLayoutTables$' ./internal/gomem
//
// rewrites layouts_gen.go from builds with the patches of every release in
// tabledReleases that the module proxy serves (see generateTables).
func TestLayoutTables(t *testing.T) {
	if os.Getenv("GOMEM_GENERATE") == "1" {
		generateTables(t)
		return
	}
	for _, rel := range tabledReleases {
		if !slices.ContainsFunc(tables, func(r tableRange) bool { return r.release == rel }) {
			t.Errorf("no table for %s: run the generator (see TestLayoutTables)", rel)
		}
	}
	for _, r := range tables {
		v := patchVersion(r.release, r.last)
		t.Run(v, func(t *testing.T) {
			// Two at a time: one toolchain downloads while another builds.
			t.Parallel()
			l, err := refLayout(buildRef(t, refBuild{toolchain: v}), r.release)
			if err != nil {
				t.Fatal(err)
			}
			if d := layoutDiff(r.layout, l); d != "" {
				t.Errorf("table %s.%d-%d differs from %s's DWARF and data (run the generator):\n%s", r.release, r.first, r.last, v, d)
			}
		})
	}
}

// generateTables writes layouts_gen.go. For each release it lists the
// patches the module proxy serves, builds the first and the last, and
// where their layouts differ bisects until every change lies between two
// adjacent patches. Patches between two checked patches with the same
// layout are taken to share it (a layout that changed and changed back
// within a release's patches would be missed); a patch the proxy does not
// serve, lying where the layout changed, is in no table.
func generateTables(t *testing.T) {
	patches := proxyPatches(t)
	var ranges []tableRange
	var checkedAll [][]string
	for _, rel := range tabledReleases {
		ps := patches[rel]
		if len(ps) == 0 {
			t.Fatalf("the module proxy serves no toolchain of %s", rel)
		}
		lay := map[int]*Layout{}
		get := func(p int) *Layout {
			if l, ok := lay[p]; ok {
				return l
			}
			v := patchVersion(rel, p)
			l, err := refLayout(buildRef(t, refBuild{toolchain: v}), rel)
			if err != nil {
				t.Fatalf("%s: %v", v, err)
			}
			t.Logf("%s: %d offsets, %d sizes, %d wait reasons", v, len(l.Offsets), len(l.Sizes), len(l.WaitReasons))
			lay[p] = l
			return l
		}
		var walk func(i, j int)
		walk = func(i, j int) {
			a, b := get(ps[i]), get(ps[j])
			if j-i <= 1 || layoutDiff(a, b) == "" {
				return
			}
			m := (i + j) / 2
			walk(i, m)
			walk(m, j)
		}
		walk(0, len(ps)-1)
		checked := slices.Sorted(maps.Keys(lay))
		cur := tableRange{release: rel, first: checked[0], last: checked[0], layout: lay[checked[0]]}
		for _, p := range checked[1:] {
			if d := layoutDiff(cur.layout, lay[p]); d != "" {
				t.Logf("%s changes the layout of %s:\n%s", patchVersion(rel, p), patchVersion(rel, cur.last), d)
				ranges = append(ranges, cur)
				checkedAll = append(checkedAll, nil)
				cur = tableRange{release: rel, first: p, last: p, layout: lay[p]}
				continue
			}
			cur.last = p
		}
		ranges = append(ranges, cur)
		checkedAll = append(checkedAll, nil)
		for i := range ranges {
			if ranges[i].release != rel {
				continue
			}
			for _, p := range checked {
				if p >= ranges[i].first && p <= ranges[i].last {
					checkedAll[i] = append(checkedAll[i], patchVersion(rel, p))
				}
			}
		}
	}
	src, err := tablesSource(ranges, checkedAll)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("layouts_gen.go", src, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote layouts_gen.go: %d tables", len(ranges))
}

// proxyPatches lists, per release, the patches whose linux/amd64
// toolchain the module proxy serves, in order.
func proxyPatches(t *testing.T) map[string][]int {
	cmd := exec.Command("go", "list", "-m", "-versions", "golang.org/toolchain")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list the toolchains on the module proxy: %v", err)
	}
	ps := map[string][]int{}
	for _, f := range strings.Fields(string(out)) {
		v, ok := strings.CutPrefix(f, "v0.0.1-")
		if !ok {
			continue
		}
		if v, ok = strings.CutSuffix(v, ".linux-amd64"); !ok {
			continue
		}
		rel, p, err := parseRelease(v)
		if err != nil || patchVersion(rel, p) != v {
			continue
		}
		ps[rel] = append(ps[rel], p)
	}
	for _, l := range ps {
		slices.Sort(l)
	}
	return ps
}

// layoutDiff describes how b differs from a, "" when they are equal.
func layoutDiff(a, b *Layout) string {
	var d []string
	if a.Go != b.Go || a.From != b.From {
		d = append(d, fmt.Sprintf("release %s/%s, then %s/%s", a.Go, a.From, b.Go, b.From))
	}
	for _, m := range []struct {
		name string
		a, b map[string]uint64
	}{{"offset", a.Offsets, b.Offsets}, {"size", a.Sizes, b.Sizes}} {
		keys := map[string]bool{}
		for k := range m.a {
			keys[k] = true
		}
		for k := range m.b {
			keys[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			va, oka := m.a[k]
			vb, okb := m.b[k]
			if va != vb || oka != okb {
				d = append(d, fmt.Sprintf("%s %s: %s, then %s", m.name, k, present(va, oka), present(vb, okb)))
			}
		}
	}
	if !reflect.DeepEqual(a.WaitReasons, b.WaitReasons) {
		d = append(d, fmt.Sprintf("wait reasons %q, then %q", a.WaitReasons, b.WaitReasons))
	}
	return strings.Join(d, "\n")
}

func present(v uint64, ok bool) string {
	if !ok {
		return "absent"
	}
	return fmt.Sprint(v)
}

// tablesSource writes layouts_gen.go's source for the table ranges rs,
// each checked against builds with the patches in checked.
func tablesSource(rs []tableRange, checked [][]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by GOMEM_GENERATE=1 go test -run '^TestLayoutTables$' ./internal/gomem; DO NOT EDIT.\n\n")
	b.WriteString("package gomem\n\n")
	b.WriteString("// tables holds the layout of the runtime's structures in each run of\n")
	b.WriteString("// patches of a Go release that share one, read from the DWARF and the data\n")
	b.WriteString("// of the reference program (testdata/ref) built for linux/amd64 with the\n")
	b.WriteString("// patches named. TestLayoutTables checks each against a fresh build.\n")
	b.WriteString("var tables = []tableRange{\n")
	for i, r := range rs {
		l := r.layout
		fmt.Fprintf(&b, "// Built with %s.\n", strings.Join(checked[i], ", "))
		fmt.Fprintf(&b, "{release: %q, first: %d, last: %d, layout: &Layout{\nGo: %q,\nFrom: %q,\n", r.release, r.first, r.last, l.Go, l.From)
		for _, mm := range []struct {
			field string
			m     map[string]uint64
		}{{"Offsets", l.Offsets}, {"Sizes", l.Sizes}} {
			fmt.Fprintf(&b, "%s: map[string]uint64{\n", mm.field)
			for _, k := range slices.Sorted(maps.Keys(mm.m)) {
				fmt.Fprintf(&b, "%q: %d,\n", k, mm.m[k])
			}
			b.WriteString("},\n")
		}
		b.WriteString("WaitReasons: []string{\n")
		for _, w := range l.WaitReasons {
			fmt.Fprintf(&b, "%q,\n", w)
		}
		b.WriteString("},\n}},\n")
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// TestTableLayoutRefuses: versions without a table, pre-releases,
// development builds and experiment builds read nothing, with an error
// naming the version.
func TestTableLayoutRefuses(t *testing.T) {
	for _, v := range []string{
		"go1.19.13", "go1.99.0", "devel +abc", "devel go1.24-abcdef Tue Jan 1 00:00:00 2024 +0000",
		"go1.23rc1", "go1.21beta1", "go1.22.3 X:nocoverageredesign", "go2.0", "", "go1.", "go1.22.", "go1.22.x",
		"go1.022.1", "go1.22.-1", "go1.+22",
	} {
		l, err := tableLayout(v)
		if err == nil || l != nil {
			t.Errorf("tableLayout(%q) = %v, %v: want an error", v, l, err)
			continue
		}
		if name := strings.Fields(v); len(name) > 0 && !strings.Contains(err.Error(), name[0]) {
			t.Errorf("tableLayout(%q): %v does not name the version", v, err)
		}
		if !strings.Contains(err.Error(), "reads nothing") {
			t.Errorf("tableLayout(%q): %v does not say it reads nothing", v, err)
		}
	}
}

// TestTableLayoutReleases: every patch a table covers gives that table,
// as the caller's own copy; the patch after the newest tabled is refused.
func TestTableLayoutReleases(t *testing.T) {
	for _, r := range tables {
		for _, v := range []string{patchVersion(r.release, r.first), patchVersion(r.release, r.last), patchVersion(r.release, (r.first+r.last)/2)} {
			l, err := tableLayout(v)
			if err != nil {
				t.Errorf("tableLayout(%q): %v", v, err)
				continue
			}
			if l.Go != r.release || l.From != "table" || len(l.WaitReasons) == 0 || !reflect.DeepEqual(l, r.layout) {
				t.Errorf("tableLayout(%q) = release %s from %s, %d wait reasons, not its table", v, l.Go, l.From, len(l.WaitReasons))
			}
			l.Offsets["runtime.g.goid"] = 1 << 40
			l.WaitReasons[0] = "scribbled"
			if r.layout.Offsets["runtime.g.goid"] == 1<<40 || r.layout.WaitReasons[0] == "scribbled" {
				t.Fatalf("tableLayout(%q) shares the table with its caller", v)
			}
		}
	}
	for _, rel := range tabledReleases {
		_, p, err := parseRelease(tabledNewest(rel))
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		v := patchVersion(rel, p+1)
		if _, err := tableLayout(v); err == nil || !strings.Contains(err.Error(), "newer than the newest patch") {
			t.Errorf("tableLayout(%q) = %v, want a refusal of an untabled patch", v, err)
		}
	}
}
