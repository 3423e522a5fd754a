//go:build linux

package allocview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/escape"
	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// The patient's allocating lines (testdata/allocs), as base:line.
const (
	lineLabel    = "main.go:31"   // fmt.Sprintf per request
	lineRemember = "main.go:37"   // &entry{...} into the pointer-rich cache
	lineCollect  = "main.go:44"   // append without pre-size
	lineScratch  = "shapes.go:44" // make of a run-time size
)

// siteLine names a site as base:line.
func siteLine(file string, line int) string { return filepath.Base(file) + ":" + strconv.Itoa(line) }

// patient runs testdata/allocs built with flags (always with the build
// machine's paths: -trimpath=false) and returns its PID and first line.
func patient(t *testing.T, flags ...string) (int, string) {
	t.Helper()
	return patientArgs(t, flags)
}

// patientArgs is patient with arguments for the program (-mode).
func patientArgs(t *testing.T, flags []string, args ...string) (int, string) {
	t.Helper()
	// A GC every few tens of milliseconds: the runtime's counts, and so
	// windows, move in steps of one GC cycle.
	return patientGOGC(t, "10", flags, args...)
}

// patientGOGC is patientArgs with GOGC set to gogc.
func patientGOGC(t *testing.T, gogc string, flags []string, args ...string) (int, string) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	bin := testbin.BuildWith(t, "./testdata/allocs", append([]string{"-trimpath=false"}, flags...)...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GOGC="+gogc)
	p := testbin.Start(t, cmd, testbin.Options{Wait: 60 * time.Second})
	return p.PID(), p.Ready()
}

// get reads the pprof profile a patient serves at url.
func get(t *testing.T, url string) *profile.Profile {
	t.Helper()
	p, err := profile.ParseData(testbin.Fetch(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// byLine sums a pprof profile's sample type by the leaf's main.* line
// (innermost frame in main, the allocation's site in the patient).
func byLine(p *profile.Profile, typ string) map[string]int64 {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == typ {
			idx = i
		}
	}
	out := map[string]int64{}
	for _, s := range p.Sample {
	frames:
		for _, l := range s.Location {
			for _, ln := range l.Line {
				if strings.HasPrefix(ln.Function.Name, "main.") {
					out[siteLine(ln.Function.Filename, int(ln.Line))] += s.Value[idx]
					break frames
				}
			}
		}
	}
	return out
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// snapshot reads the heap profile with the program's own profile at path
// fetched in between, and returns both where the two readings around the
// fetch are equal bucket by bucket: the runtime publishes its counts at a
// GC's mark termination and again when that cycle's sweeping ends, so a
// fetch between two equal readings saw what they saw. GOGC=1000 leaves
// some hundreds of milliseconds between publications.
func snapshot(t *testing.T, p *gomem.Process, url string) (*gomem.HeapProfile, *profile.Profile) {
	t.Helper()
	// Buckets with nothing published yet (created since the last GC)
	// are left out: the fetch itself creates some.
	counted := func(h *gomem.HeapProfile) map[string]gomem.HeapRecord {
		m := map[string]gomem.HeapRecord{}
		for _, r := range h.Records {
			if r.AllocObjects != 0 || r.FreeObjects != 0 {
				m[r.Key()] = r
			}
		}
		return m
	}
	var last string
	same := func(a, b *gomem.HeapProfile) bool {
		ma, mb := counted(a), counted(b)
		if len(ma) != len(mb) {
			last = fmt.Sprintf("%d counted buckets, then %d (GC %d, then %d)", len(ma), len(mb), a.GCCycles, b.GCCycles)
			return false
		}
		for k, r := range mb {
			if o := ma[k]; o.AllocObjects != r.AllocObjects || o.FreeObjects != r.FreeObjects || o.AllocBytes != r.AllocBytes || o.FreeBytes != r.FreeBytes {
				last = fmt.Sprintf("a bucket went from %+v to %+v (GC %d, then %d)", o, r, a.GCCycles, b.GCCycles)
				return false
			}
		}
		return true
	}
	waitGC(t, p, 2)
	for range 50 {
		h, err := p.HeapProfile()
		if err != nil {
			t.Fatal(err)
		}
		theirs := get(t, url)
		h2, err := p.HeapProfile()
		if err != nil {
			t.Fatal(err)
		}
		if same(h, h2) {
			return h, theirs
		}
	}
	t.Fatalf("the profile changed around each of 50 fetches of the program's own; the last time: %s", last)
	return nil, nil
}

// waitGC waits until the program has completed at least n GCs.
func waitGC(t *testing.T, p *gomem.Process, n uint32) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(20 * time.Millisecond) {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.GCCycles >= n {
			return
		}
	}
	t.Fatalf("fewer than %d GCs in 30 s", n)
}

// TestAllocsMatchesProgram: the allocations of a window, the difference of
// two readings of the runtime's buckets, equal by site the difference of
// the program's own /debug/pprof/allocs fetched at the same instants.
func TestAllocsMatchesProgram(t *testing.T) {
	pid, addr := patientGOGC(t, "1000", nil)
	time.Sleep(time.Second) // past the start-up
	p, err := gomem.Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h0, p0 := snapshot(t, p, "http://"+addr+"/debug/pprof/allocs")
	waitGC(t, p, h0.GCCycles+2)
	h1, p1 := snapshot(t, p, "http://"+addr+"/debug/pprof/allocs")
	ours := byLine(p.Pprof(diff(h0, h1, &Report{})), "alloc_space")
	p0.Scale(-1)
	delta, err := profile.Merge([]*profile.Profile{p1, p0})
	if err != nil {
		t.Fatal(err)
	}
	own := byLine(delta, "alloc_space")
	var sumOurs, sumOwn int64
	for k, v := range own {
		sumOurs += ours[k]
		sumOwn += v
		if q := ratio(ours[k], v); q < 0.99 || q > 1.01 {
			t.Errorf("%s: %d bytes read, the program's own %d (ratio %.3f)", k, ours[k], v, q)
		}
	}
	t.Logf("alloc_space through main over %d GCs: ours %d, the program's %d (ratio %.4f) at %d sites",
		h1.GCCycles-h0.GCCycles, sumOurs, sumOwn, ratio(sumOurs, sumOwn), len(own))
	if len(own) < 8 || sumOwn == 0 {
		t.Errorf("the program's own profile has %d sites through main", len(own))
	}
}

// TestAllocsWindow: an allocs report covers about the window asked for, in
// GC cycles, with rates, the top sites of both lists and the text saying
// what the counts are as of.
func TestAllocsWindow(t *testing.T) {
	pid, _ := patient(t)
	r, err := Collect(context.Background(), Options{PID: pid, Type: Allocs, Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.GCs < 3 || r.Window < time.Second || r.Window > 10*time.Second {
		t.Errorf("window %s with %d GCs: want about 2 s and several GCs", r.Window, r.GCs)
	}
	if len(r.Sites) < 5 || len(r.ByObjects) < 5 || r.Sites[0].BytesPerSec <= 0 || r.Sites[0].ObjectsPerSec <= 0 {
		t.Errorf("sites %+v", r.Sites)
	}
	if r.Pprof().DefaultSampleType != "alloc_space" || r.Pprof().DurationNanos != r.Window.Nanoseconds() {
		t.Errorf("pprof: default %q, duration %d", r.Pprof().DefaultSampleType, r.Pprof().DurationNanos)
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"as of the last completed GC", "bytes/s", "objects/s", "main.collect", "main.scratch"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// TestAllocHeapMatchesProgram: the live heap by site equals the program's
// own /debug/pprof/heap fetched at the same instant, and the pointer-rich
// cache is among its top holders of objects.
func TestAllocHeapMatchesProgram(t *testing.T) {
	pid, addr := patientGOGC(t, "1000", nil)
	time.Sleep(time.Second) // the cache fills
	p, err := gomem.Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h, theirs := snapshot(t, p, "http://"+addr+"/debug/pprof/heap")
	r := &Report{Type: Heap}
	r.ranks(p.Sites(h), 20)
	r.prof = p.Pprof(h)
	ours, own := byLine(r.Pprof(), "inuse_objects"), byLine(theirs, "inuse_objects")
	t.Logf("inuse_objects at the cache: ours %d, the program's %d (ratio %.3f)", ours[lineRemember], own[lineRemember], ratio(ours[lineRemember], own[lineRemember]))
	for k, v := range own {
		if q := ratio(ours[k], v); v != 0 && (q < 0.99 || q > 1.01) {
			t.Errorf("%s: %d objects live read, the program's own %d", k, ours[k], v)
		}
	}
	if r.Pprof().DefaultSampleType != "inuse_space" {
		t.Errorf("default sample type %q", r.Pprof().DefaultSampleType)
	}
	var found bool
	for _, s := range r.ByObjects[:min(3, len(r.ByObjects))] {
		found = found || siteLine(s.File, s.Line) == lineRemember
	}
	if !found {
		t.Errorf("the cache is not among the top live sites by objects: %+v", r.ByObjects)
	}
}

// TestEscapeJoin: each of the patient's shapes gets the compiler's reason
// and the matching suggestion at its file:line, the source found from the
// binary's own paths (with and without its symbol table), or given where
// the binary names its files by module path (-trimpath).
func TestEscapeJoin(t *testing.T) {
	root, err := escape.FindModule(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags []string
		src   string
		file  string // the site's file as the binary names it
	}{
		{"plain", nil, "auto", "testdata/allocs/main.go"},
		// No symbol table or DWARF: the runtime's variables are found
		// from its code, the files from the function table.
		{"stripped", []string{"-ldflags=-s -w"}, "auto", "testdata/allocs/main.go"},
		{"trimpath", []string{"-trimpath"}, root.Root, root.Path + "/internal/allocview/testdata/allocs/main.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, _ := patient(t, tc.flags...)
			time.Sleep(time.Second) // past the start-up's one-time allocations
			r, err := Collect(context.Background(), Options{PID: pid, Type: Allocs, Duration: 3 * time.Second, Src: tc.src, Top: 30})
			if err != nil {
				t.Fatal(err)
			}
			if r.Escape == nil || r.Escape.Err != "" {
				t.Fatalf("escape join: %+v", r.Escape)
			}
			src := tc.file
			if !strings.HasPrefix(src, root.Path) {
				src, _ = filepath.Abs(src)
			}
			want := map[string]escape.Class{
				lineLabel: escape.FmtBoxing, lineRemember: escape.StoredInHeap, lineCollect: escape.AppendGrowth,
				"main.go:36":   escape.StoredInHeap, // moved to heap: n, pointed to by the cache's entry
				"shapes.go:26": escape.Returned, "shapes.go:31": escape.Closure, "shapes.go:37": escape.TooLarge,
				lineScratch: escape.OnStack, "shapes.go:51": escape.Returned, "shapes.go:56": escape.Returned,
				"shapes.go:61": escape.InterfaceBoxing,
			}
			got := map[string]bool{}
			for _, s := range append(r.Sites, r.ByObjects...) {
				j := s.Escape
				if j == nil || filepath.Dir(j.File) != filepath.Dir(src) {
					continue
				}
				line := siteLine(j.File, j.Line)
				c, ok := want[line]
				if !ok {
					continue
				}
				if len(j.Reasons) == 0 {
					t.Errorf("%s %s: no reason", s.Func, line)
					continue
				}
				if j.Reasons[0].Class != string(c) || j.Reasons[0].Suggestion != c.Suggestion() {
					t.Errorf("%s %s: %+v, want class %q", s.Func, line, j.Reasons[0], c)
				}
				got[line] = true
			}
			// The rarest shapes (a few kB a second) may go unsampled in a
			// window of a slowed patient; the big three must be there.
			for _, line := range []string{lineLabel, lineRemember, lineCollect} {
				if !got[line] {
					t.Errorf("no site joined at %s: %+v", line, r.Sites)
				}
			}
			if len(got) < len(want)-2 {
				t.Errorf("%d of the %d shapes joined: %v", len(got), len(want), got)
			}
			t.Logf("escape join: reasons at %d of %d top sites in the module (%d findings)", r.Escape.Joined, r.Escape.Sites, r.Escape.Findings)
			for _, s := range r.Sites {
				if s.Escape != nil && len(s.Escape.Reasons) == 0 {
					t.Logf("no reason: %s %s:%d, asked at %s:%d", s.Func, s.File, s.Line, s.Escape.File, s.Escape.Line)
				}
			}
			if r.Escape.Sites == 0 || float64(r.Escape.Joined) < 0.9*float64(r.Escape.Sites) {
				t.Errorf("reasons at %d of %d sites, want at least 90%%", r.Escape.Joined, r.Escape.Sites)
			}
		})
	}
}

// TestAllocJoinErrors: a source that is another module, or none, says so in
// one line and keeps the profile.
func TestAllocJoinErrors(t *testing.T) {
	pid, _ := patient(t)
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "go.mod"), []byte("module example.com/other\n"), 0o644)
	for _, tc := range []struct{ src, want string }{
		{other, "is module example.com/other"},
		{"/", "no go.mod"},
	} {
		r, err := Collect(context.Background(), Options{PID: pid, Type: Heap, Src: tc.src})
		if err != nil {
			t.Fatal(err)
		}
		if r.Escape == nil || !strings.Contains(r.Escape.Err, tc.want) || strings.Contains(r.Escape.Err, "\n") {
			t.Errorf("src %s: %+v, want one line with %q", tc.src, r.Escape, tc.want)
		}
	}
}

// TestAllocProfilingOff: the live heap of a binary whose linker turned memory
// profiling off is refused with the reason.
func TestAllocProfilingOff(t *testing.T) {
	pid, _ := patient(t, "-tags=noprof")
	_, err := Collect(context.Background(), Options{PID: pid, Type: Heap})
	if !errors.Is(err, gomem.ErrMemProfilingOff) || strings.Contains(err.Error(), "\n") {
		t.Errorf("err %v, want ErrMemProfilingOff in one line", err)
	}
}

// TestAllocSampledMatchesBook: with memory profiling off, the allocator's slow
// path sampled from outside ranks the top sites as the runtime's own book
// does in the same program built with profiling on, run side by side over
// the same window, within the probe budget: on the whole patient, on its
// small objects alone and on its buffers alone.
func TestAllocSampledMatchesBook(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Uprobes)
	for _, mode := range []string{"all", "small", "buffers"} {
		t.Run(mode, func(t *testing.T) {
			off, _ := patientArgs(t, []string{"-tags=noprof"}, "-mode", mode)
			on, _ := patientArgs(t, nil, "-mode", mode)
			time.Sleep(time.Second) // past the start-up
			var book *Report
			var berr error
			var wg sync.WaitGroup
			wg.Go(func() {
				book, berr = Collect(context.Background(), Options{PID: on, Type: Allocs, Duration: 3 * time.Second, Top: 5})
			})
			r, err := Collect(context.Background(), Options{PID: off, Type: Allocs, Duration: 3 * time.Second, Top: 5})
			wg.Wait()
			if err != nil || berr != nil {
				t.Fatalf("sampled: %v; book: %v", err, berr)
			}
			if r.Sampled == nil || r.Sampled.Bias == "" || r.Sampled.RefillPerSec <= 0 {
				t.Fatalf("not sampled: %+v", r.Sampled)
			}
			if r.Sampled.CostCPU > 0.01 {
				t.Errorf("estimated cost %.2f%% of a CPU, over the 1%% budget", 100*r.Sampled.CostCPU)
			}
			name := func(s Site) string { return s.Func + " " + siteLine(s.File, s.Line) }
			var sampled, truth []string
			for _, s := range r.Sites {
				sampled = append(sampled, name(s))
			}
			for _, s := range book.Sites {
				truth = append(truth, name(s))
			}
			same, common := 0, 0
			for i, s := range truth {
				if i < len(sampled) && sampled[i] == s {
					same++
				}
				if slices.Contains(sampled, s) {
					common++
				}
			}
			t.Logf("sampled (%.0f refills/s, cost %.2f%% of a CPU): %v", r.Sampled.RefillPerSec, 100*r.Sampled.CostCPU, sampled)
			t.Logf("the runtime's book: %v", truth)
			t.Logf("%s: %d of the book's top %d in the sampled top %d, %d in the same place", mode, common, len(truth), len(sampled), same)
			// Each list's first is among the other's first two: sites
			// within 15% of each other in the book (the whole patient's
			// first two, the small objects' second and third) are closer
			// than the sampling's bias, and swap in some runs.
			if len(sampled) < 2 || len(truth) < 2 || !slices.Contains(sampled[:2], truth[0]) || !slices.Contains(truth[:2], sampled[0]) {
				t.Errorf("top sites %v, the book's %v", sampled, truth)
			}
			if common < 4 {
				t.Errorf("%d of the book's top five among the sampled top five", common)
			}
			var text bytes.Buffer
			WriteText(&text, r)
			for _, want := range []string{"memory profiling is off", "bias:", "runtime.(*mcache).refill", "spans/s"} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
}

func TestAllocCollectBadType(t *testing.T) {
	if _, err := Collect(context.Background(), Options{PID: os.Getpid(), FS: proc.FS{}, Type: "cpu"}); err == nil {
		t.Error("type cpu accepted")
	}
}

// TestAllocAutoSourceOwner: a source the program's paths name is not built when
// it belongs to someone other than root or the program's owner.
func TestAllocAutoSourceOwner(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.AMD64, testenv.Root)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for _, f := range []string{"main.go", "shapes.go", "pprof.go"} {
		b, err := os.ReadFile(filepath.Join("testdata/allocs", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/allocs\n\ngo 1.26\n"), 0o644)
	bin := filepath.Join(dir, "allocs")
	build := exec.Command("go", "build", "-trimpath=false", "-o", bin, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, p := range []string{dir, filepath.Join(dir, "go.mod")} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin)
	testbin.Start(t, cmd, testbin.Options{Wait: 60 * time.Second})
	r, err := Collect(context.Background(), Options{PID: cmd.Process.Pid, Type: Heap, Src: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Escape == nil || !strings.Contains(r.Escape.Err, "belongs to uid 65534") || r.Escape.Findings != 0 {
		t.Errorf("escape %+v, want the source refused", r.Escape)
	}
	// Given explicitly, it is built.
	r, err = Collect(context.Background(), Options{PID: cmd.Process.Pid, Type: Heap, Src: dir})
	if err != nil {
		t.Fatal(err)
	}
	if r.Escape == nil || r.Escape.Err != "" || r.Escape.Findings == 0 {
		t.Errorf("escape with --src given: %+v", r.Escape)
	}
}
