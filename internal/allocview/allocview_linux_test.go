//go:build linux

package allocview

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
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

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// The patient's allocating lines (testdata/allocs), as base:line.
const (
	lineLabel    = "main.go:30"   // fmt.Sprintf per request
	lineRemember = "main.go:36"   // &entry{...} into the pointer-rich cache
	lineCollect  = "main.go:43"   // append without pre-size
	lineScratch  = "shapes.go:42" // make of a run-time size
)

// siteLine names a site as base:line.
func siteLine(file string, line int) string { return filepath.Base(file) + ":" + strconv.Itoa(line) }

// patient runs testdata/allocs built with flags (always with the build
// machine's paths: -trimpath=false) and returns its PID and first line.
func patient(t *testing.T, flags ...string) (int, string) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	bin := testbin.BuildWith(t, "./testdata/allocs", append([]string{"-trimpath=false"}, flags...)...)
	cmd := exec.Command(bin)
	// A GC every few tens of milliseconds: both the runtime's counts and
	// so both windows compared move in steps of one GC cycle.
	cmd.Env = append(os.Environ(), "GOGC=10")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start patient: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			t.Fatal("patient exited before it started")
		}
		return cmd.Process.Pid, l
	case <-time.After(60 * time.Second):
		t.Fatal("patient did not start in 60 s")
	}
	return 0, ""
}

func get(t *testing.T, url string) *profile.Profile {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	p, err := profile.ParseData(b)
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

// TestAllocsMatchesProgram: the allocations read over a window equal, by
// site and in total, the program's own /debug/pprof/allocs?seconds=N
// taken over the same seconds (both are differences of the runtime's
// buckets as of the last GC before each reading; with GOGC=10 the GCs run
// every few tens of milliseconds, so the windows differ by about that).
func TestAllocsMatchesProgram(t *testing.T) {
	pid, addr := patient(t)
	time.Sleep(time.Second) // past the start-up
	var theirs *profile.Profile
	var wg sync.WaitGroup
	wg.Go(func() { theirs = get(t, "http://"+addr+"/debug/pprof/allocs?seconds=3") })
	r, err := Collect(context.Background(), Options{PID: pid, Type: Allocs, Duration: 3 * time.Second})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if r.GCs < 3 || r.Window < 2500*time.Millisecond || r.Window > 3500*time.Millisecond {
		t.Errorf("window %s with %d GCs: want about 3 s and several GCs", r.Window, r.GCs)
	}
	ours, own := byLine(r.Pprof(), "alloc_space"), byLine(theirs, "alloc_space")
	var sumOurs, sumOwn int64
	for _, v := range ours {
		sumOurs += v
	}
	for _, v := range own {
		sumOwn += v
	}
	t.Logf("window: ours %s (%d GCs), the program's %s", r.Window, r.GCs, time.Duration(theirs.DurationNanos))
	t.Logf("alloc_space through main: ours %d, the program's %d (ratio %.3f); collect %.3f, label %.3f, remember %.3f",
		sumOurs, sumOwn, ratio(sumOurs, sumOwn), ratio(ours[lineCollect], own[lineCollect]),
		ratio(ours[lineLabel], own[lineLabel]), ratio(ours[lineRemember], own[lineRemember]))
	for _, line := range []string{lineCollect, lineLabel, lineRemember, lineScratch} {
		if q := ratio(ours[line], own[line]); q < 0.85 || q > 1.18 {
			t.Errorf("%s: %d bytes read, the program's own %d (ratio %.2f)", line, ours[line], own[line], q)
		}
	}
	if q := ratio(sumOurs, sumOwn); q < 0.9 || q > 1.11 {
		t.Errorf("total %d bytes read, the program's own %d (ratio %.2f)", sumOurs, sumOwn, q)
	}
	var top string
	for k, v := range own {
		if top == "" || v > own[top] {
			top = k
		}
	}
	if len(r.Sites) == 0 || siteLine(r.Sites[0].File, r.Sites[0].Line) != top {
		t.Errorf("top site by bytes %+v, the program's own top %s", r.Sites, top)
	}
	if r.Sites[0].BytesPerSec <= 0 || r.Sites[0].ObjectsPerSec <= 0 {
		t.Errorf("top site without rates: %+v", r.Sites[0])
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

// TestHeapMatchesProgram: the live heap's top site, the pointer-rich
// cache, holds what the program's own /debug/pprof/heap says (read right
// after: a GC may end between the two).
func TestHeapMatchesProgram(t *testing.T) {
	pid, addr := patient(t)
	time.Sleep(500 * time.Millisecond) // the cache fills (20,000 entries)
	r, err := Collect(context.Background(), Options{PID: pid, Type: Heap})
	if err != nil {
		t.Fatal(err)
	}
	theirs := get(t, "http://"+addr+"/debug/pprof/heap")
	ours, own := byLine(r.Pprof(), "inuse_objects"), byLine(theirs, "inuse_objects")
	t.Logf("inuse_objects at the cache: ours %d, the program's %d (ratio %.3f)", ours[lineRemember], own[lineRemember], ratio(ours[lineRemember], own[lineRemember]))
	if q := ratio(ours[lineRemember], own[lineRemember]); q < 0.8 || q > 1.25 {
		t.Errorf("cache entries live: read %d, the program's own %d", ours[lineRemember], own[lineRemember])
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

// TestEscapeJoin: each of the patient's three shapes gets the compiler's
// reason and the matching suggestion at its file:line, the source found
// from the binary's own paths, or given where
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
		{"trimpath", []string{"-trimpath"}, root.Root, root.Path + "/internal/allocview/testdata/allocs/main.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, _ := patient(t, tc.flags...)
			r, err := Collect(context.Background(), Options{PID: pid, Type: Allocs, Duration: 2 * time.Second, Src: tc.src, Top: 30})
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
				"main.go:35":   escape.StoredInHeap, // moved to heap: n, pointed to by the cache's entry
				"shapes.go:24": escape.Returned, "shapes.go:29": escape.Closure, "shapes.go:35": escape.TooLarge,
				lineScratch: escape.OnStack, "shapes.go:49": escape.Returned, "shapes.go:54": escape.Returned,
				"shapes.go:59": escape.InterfaceBoxing,
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
			for line := range want {
				if !got[line] {
					t.Errorf("no site joined at %s: %+v", line, r.Sites)
				}
			}
			t.Logf("escape join: reasons at %d of %d top sites in the module (%d findings)", r.Escape.Joined, r.Escape.Sites, r.Escape.Findings)
			if r.Escape.Sites == 0 || float64(r.Escape.Joined) < 0.9*float64(r.Escape.Sites) {
				t.Errorf("reasons at %d of %d sites, want at least 90%%", r.Escape.Joined, r.Escape.Sites)
			}
		})
	}
}

// TestJoinErrors: a source that is another module, or none, says so in
// one line and keeps the profile.
func TestJoinErrors(t *testing.T) {
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

// TestProfilingOff: the live heap of a binary whose linker turned memory
// profiling off is refused with the reason.
func TestProfilingOff(t *testing.T) {
	pid, _ := patient(t, "-tags=noprof")
	_, err := Collect(context.Background(), Options{PID: pid, Type: Heap})
	if !errors.Is(err, gomem.ErrMemProfilingOff) || strings.Contains(err.Error(), "\n") {
		t.Errorf("err %v, want ErrMemProfilingOff in one line", err)
	}
}

// TestSampledMatchesBook: with memory profiling off, the allocator's slow
// path sampled from outside ranks the top sites as the runtime's own book
// does in the same program built with profiling on, run side by side over
// the same window, within the probe budget.
func TestSampledMatchesBook(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Uprobes)
	off, _ := patient(t, "-tags=noprof")
	on, _ := patient(t)
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
	t.Logf("sampled (%.0f refills/s, cost %.2f%% of a CPU): %v", r.Sampled.RefillPerSec, 100*r.Sampled.CostCPU, sampled)
	t.Logf("the runtime's book: %v", truth)
	if len(sampled) == 0 || sampled[0] != truth[0] {
		t.Errorf("top site %v, the book's %v", sampled, truth)
	}
	// The top four of the book are among the sampled top five.
	for _, s := range truth[:min(4, len(truth))] {
		if !slices.Contains(sampled, s) {
			t.Errorf("the book's %s is not among the sampled top five %v", s, sampled)
		}
	}
	if q := float64(r.TotalBytes) / r.Window.Seconds() / (float64(book.TotalBytes) / book.Window.Seconds()); q < 0.7 || q > 1.4 {
		t.Errorf("total bytes/s sampled %.0f against the book's %.0f", float64(r.TotalBytes)/r.Window.Seconds(), float64(book.TotalBytes)/book.Window.Seconds())
	}
	var text bytes.Buffer
	WriteText(&text, r)
	for _, want := range []string{"memory profiling is off", "bias:", "runtime.(*mcache).refill", "spans/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

func TestCollectBadType(t *testing.T) {
	if _, err := Collect(context.Background(), Options{PID: os.Getpid(), FS: proc.FS{}, Type: "cpu"}); err == nil {
		t.Error("type cpu accepted")
	}
}

// TestAutoSourceOwner: a source the program's paths name is not built when
// it belongs to someone other than root or the program's owner.
func TestAutoSourceOwner(t *testing.T) {
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
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	bufio.NewScanner(out).Scan()
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
