package doctor

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/window"
)

// startBooks runs behaviour of the patient program in testdata/prog
// ("books", "booksnoprof", which takes no behaviour, or "judged") and
// returns its pid and, for servers, its address.
func startBooks(t *testing.T, prog, behaviour string, env ...string) (pid int, addr string) {
	t.Helper()
	testenv.Require(t, testenv.Linux)
	var args []string
	if behaviour != "" {
		args = []string{behaviour}
	}
	cmd := exec.Command(testbin.Build(t, "./testdata/"+prog), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// The caches take a few seconds to fill on a loaded host.
	return startReady(t, cmd, 60*time.Second)
}

// booksText summarises a window's books for the test log.
func booksText(w *Window) string {
	if w == nil || w.Runtime == nil || w.Runtime.Books == nil {
		return "no books"
	}
	b := w.Runtime.Books
	var s strings.Builder
	fmt.Fprintf(&s, "cpu %.2f cores, rss %.0f MB; goroutines %d, stacks %.1f MB, created %d (%v) in %.1fs\n", w.Cores(), rssMB(w), b.Goroutines, float64(b.StackBytes)/1e6, b.Created, b.CreatedKnown, b.Seconds)
	for _, g := range b.Groups {
		fmt.Fprintf(&s, "  group %d %s start %s created %s:%d waits %s stack %.1f MB heap %.1f MB (%d obj)\n", g.Count, g.State, g.Start.Func, g.CreatedBy.File, g.CreatedBy.Line, g.WaitsIn.Func, float64(g.StackBytes)/1e6, float64(g.HeapBytes)/1e6, g.HeapObjects)
	}
	fmt.Fprintf(&s, "  heap profile %v %s inuse %.1f MB %d obj\n", b.HeapProfile, b.HeapProfileWhy, float64(b.HeapInUseBytes)/1e6, b.HeapInUseObjects)
	for _, h := range b.TopObjects {
		fmt.Fprintf(&s, "  top objects %s (own %s:%d) %d obj %.1f MB\n", h.Func, h.Own.Func, h.Own.Line, h.InUseObjects, float64(h.InUseBytes)/1e6)
	}
	for _, h := range b.TopBytes {
		fmt.Fprintf(&s, "  top bytes %s (own %s:%d) %d obj %.1f MB\n", h.Func, h.Own.Func, h.Own.Line, h.InUseObjects, float64(h.InUseBytes)/1e6)
	}
	gc, as, ok := b.GCCores()
	e := b.End
	fmt.Fprintf(&s, "  gc cycles %d->%d (%.2f/s) gc cores %.3f assist %.3f (%v) gogc %d limit %d marked %.1f MB live %.1f MB goal %.1f MB scan %.1f MB objects %d stackinuse %.1f MB",
		b.Start.Cycles, e.Cycles, b.CyclesPerSec(), gc, as, ok, e.GOGC, e.MemoryLimit, float64(e.HeapMarked)/1e6, float64(e.HeapLive)/1e6, float64(e.HeapGoal)/1e6, float64(e.ScanHeap)/1e6, e.HeapObjects, float64(e.StackInUse)/1e6)
	if w.Syscalls != nil {
		fmt.Fprintf(&s, "\n  syscalls %s", topSyscalls(w.Syscalls, 12))
	}
	if w.Stacks != nil {
		fmt.Fprintf(&s, "\n  stacks %d samples classes %v kernel %s", w.Stacks.Samples, w.Stacks.Classes, joinShares(w.Stacks.KernelPaths, 5))
	}
	return s.String()
}

func rssMB(w *Window) float64 {
	if len(w.Series) == 0 {
		return 0
	}
	return float64(w.Series[len(w.Series)-1].RSS) / 1e6
}

// lookBooks diagnoses pid over a 4 s window with syscall counts, stack
// samples and the runtime (and its books), and returns the report and the
// window.
func lookBooks(t *testing.T, pid int) (*Report, *Window) {
	t.Helper()
	looks := []window.Look{window.SyscallsLook{}, window.StacksLook{}, window.RuntimeLook{}}
	look := func() (*Report, *Window) {
		ws, host, notes, err := window.Collect(context.Background(), window.CollectConfig{PIDs: []int{pid}, Duration: 4 * time.Second, Interval: 500 * time.Millisecond, Looks: looks})
		if err != nil {
			t.Fatal(err)
		}
		return Diagnose(ws, host, notes, true), ws[0]
	}
	rep, w := look()
	// Syscall counters may wait on the kernel's tracepoint lock while
	// another look releases its events: try twice more.
	for try := 0; try < 2 && lookFailed(rep); try++ {
		t.Logf("retrying: %v", rep.Notes)
		time.Sleep(3 * time.Second)
		rep, w = look()
	}
	return rep, w
}

// booksCase is a patient of the rules that read the runtime's books and
// its expected verdict.
type booksCase struct {
	// prog is the program under testdata ("books" when empty) and
	// behaviour its argument.
	prog, behaviour string
	env             []string
	// load is the request rate sent to a server behaviour, 0 for none.
	load int
	// warn is the exact set of findings at warn level or above.
	warn []string
	// info: a rule that must fire at info level.
	info string
	// code: a warn-level cause names a function containing this, with its
	// line.
	code string
}

// runBooksCases diagnoses each case's patient over a 4 s window, two at a
// time, and checks its verdict. BOOKS_ONLY=a,b runs only those behaviours.
func runBooksCases(t *testing.T, tests []booksCase) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	only := os.Getenv("BOOKS_ONLY")
	for _, tt := range tests {
		name := cmp.Or(tt.behaviour, tt.prog)
		if only != "" && !slices.Contains(strings.Split(only, ","), name) {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			insideSlots <- struct{}{}
			defer func() { <-insideSlots }()
			pid, addr := startBooks(t, cmp.Or(tt.prog, "books"), tt.behaviour, tt.env...)
			// Past the start-up: a process a moment old doubles its few
			// MB of RSS within seconds, which memory-growth warns of.
			time.Sleep(1500 * time.Millisecond)
			if tt.load > 0 {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go steadyLoad(ctx, "http://"+addr+"/", tt.load)
				time.Sleep(time.Second)
			}
			rep, w := lookBooks(t, pid)
			fs := findingsOf(rep, pid)
			t.Logf("%s: %s\nnotes %v%s", name, booksText(w), rep.Notes, describe(fs))
			// Each failure repeats the findings: with parallel subtests
			// the log above may be printed far from the failure.
			if got := warnIDs(fs); !slices.Equal(got, tt.warn) {
				t.Errorf("%s: warn-level findings %v, want %v; got:%s", name, got, tt.warn, describe(fs))
			}
			if tt.code != "" && !slices.ContainsFunc(fs, func(f Finding) bool {
				return f.Severity >= Warn && slices.ContainsFunc(f.Code, func(c CodeRef) bool { return strings.Contains(c.Func, tt.code) && c.Line > 0 })
			}) {
				t.Errorf("%s: no warn-level cause names %s with its line; got:%s", name, tt.code, describe(fs))
			}
			if tt.info != "" && !slices.ContainsFunc(fs, func(f Finding) bool { return f.ID == tt.info && f.Severity == Info }) {
				t.Errorf("%s: %s not found at info level; got:%s", name, tt.info, describe(fs))
			}
		})
	}
}

// TestBooksPatients judges the rules that read the runtime's books (and
// the connection rule) on patients written for them and on controls that
// look alike: each must get exactly its expected causes at warn level,
// with the code named, and the controls nothing above info.
func TestBooksPatients(t *testing.T) {
	runBooksCases(t, []booksCase{
		// Memory held by parked goroutines.
		{behaviour: "gateway", warn: []string{"goroutine-memory"}, code: "main.gateway.func1"},
		{behaviour: "pushserver", warn: []string{"goroutine-memory"}, code: "main.pushServer.func1"},
		{prog: "booksnoprof", info: "goroutine-memory"},
		{behaviour: "fewconns"},
		{behaviour: "workers"},
		// The live heap's holders.
		{behaviour: "ptrcache", warn: []string{"heap-holders"}, code: "main.ptrCache"},
		{behaviour: "expirycache", warn: []string{"heap-holders"}, code: "main.expiryCache.func1"},
		{behaviour: "catalog", info: "heap-holders"},
		{behaviour: "pfcache"},
		// Goroutine churn.
		{behaviour: "spawner", warn: []string{"goroutine-churn"}, code: "main.spawner.func1"},
		{behaviour: "fanout", load: 1000, info: "goroutine-churn"},
		{behaviour: "pool"},
		// GC against goal and limit.
		{behaviour: "gclimit", env: []string{"GOMEMLIMIT=100MiB"}, warn: []string{"gc-pressure"}},
		{behaviour: "gogclow", env: []string{"GOGC=10"}, warn: []string{"gc-pressure"}},
		{behaviour: "gcbusy", warn: []string{"gc-pressure"}, code: "main.tree"},
		{behaviour: "batch"},
		// Connections.
		{behaviour: "dialhttp", warn: []string{"connection-churn"}, code: "dialHTTP"},
		{behaviour: "dialraw", warn: []string{"connection-churn"}, code: "dialRaw"},
		{behaviour: "idlecap", warn: []string{"connection-churn"}, code: "burstHTTP"},
		{behaviour: "shortserver", info: "connection-churn"},
		{behaviour: "reuse"},
	})
}

// TestJudgedPatients runs the second round of patients (testdata/judged),
// written after the thresholds above were set, in other shapes: a proxy
// copying through buffers of its own, an LRU of list elements, a slice of
// pointer-free scores, a goroutine per log line, keep-alive disabled, a
// body closed unread, GOGC=off under a memory limit, and controls. Their
// expected verdicts were written down before they first ran.
func TestJudgedPatients(t *testing.T) {
	runBooksCases(t, []booksCase{
		{prog: "judged", behaviour: "proxy", warn: []string{"goroutine-memory"}, code: "main.proxy.func2"},
		{prog: "judged", behaviour: "lru", warn: []string{"heap-holders"}, code: "main.lru"},
		{prog: "judged", behaviour: "scores"},
		{prog: "judged", behaviour: "logship", warn: []string{"goroutine-churn"}, code: "main.logShip.func1"},
		{prog: "judged", behaviour: "nokeepalive", warn: []string{"connection-churn"}, code: "main.client.func1"},
		{prog: "judged", behaviour: "unreadbody", warn: []string{"connection-churn"}, code: "main.client.func1"},
		{prog: "judged", behaviour: "keepalive"},
		{prog: "judged", behaviour: "limitbatch", env: []string{"GOGC=off", "GOMEMLIMIT=96MiB"}, warn: []string{"gc-pressure"}},
		{prog: "judged", behaviour: "idleconns"},
	})
}
