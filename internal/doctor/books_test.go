package doctor

import (
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

// startBooks runs a patient of testdata/books (or testdata/booksnoprof
// when behaviour is "noprof") and returns its pid and, for servers, its
// address.
func startBooks(t *testing.T, behaviour string, env ...string) (pid int, addr string) {
	t.Helper()
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/books")
	args := []string{behaviour}
	if behaviour == "noprof" {
		bin, args = testbin.Build(t, "./testdata/booksnoprof"), nil
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// The caches take a few seconds to fill on a loaded host.
	return startReady(t, cmd, behaviour, 60*time.Second)
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

// TestBooksPatients judges the rules that read the runtime's books (and
// the connection rule) on patients written for them and on controls that
// look alike: each must get exactly its expected causes at warn level,
// with the code named, and the controls nothing above info.
func TestBooksPatients(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	tests := []struct {
		behaviour string
		env       []string
		// load is the request rate sent to a server behaviour, 0 for none.
		load int
		warn []string
		// info: a rule that must fire at info level.
		info string
		// code: a warn-level cause names a function containing this, with
		// its line.
		code string
	}{
		// Memory held by parked goroutines.
		{behaviour: "gateway", warn: []string{"goroutine-memory"}, code: "main.gateway.func1"},
		{behaviour: "pushserver", warn: []string{"goroutine-memory"}, code: "main.pushServer.func1"},
		{behaviour: "noprof", info: "goroutine-memory"},
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
	}
	only := os.Getenv("BOOKS_ONLY")
	for _, tt := range tests {
		if only != "" && !slices.Contains(strings.Split(only, ","), tt.behaviour) {
			continue
		}
		t.Run(tt.behaviour, func(t *testing.T) {
			t.Parallel()
			insideSlots <- struct{}{}
			defer func() { <-insideSlots }()
			pid, addr := startBooks(t, tt.behaviour, tt.env...)
			// Past the start-up: a process a moment old doubles its few
			// MB of RSS within seconds, which memory-growth warns of.
			time.Sleep(1500 * time.Millisecond)
			if tt.load > 0 {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go steadyLoad(ctx, "http://"+addr+"/", tt.load)
				time.Sleep(time.Second)
			}
			looks := []window.Look{window.SyscallsLook{}, window.StacksLook{}, window.RuntimeLook{}}
			look := func() (*Report, *Window) {
				ws, host, notes, err := window.Collect(context.Background(), window.CollectConfig{PIDs: []int{pid}, Duration: 4 * time.Second, Interval: 500 * time.Millisecond, Looks: looks})
				if err != nil {
					t.Fatal(err)
				}
				return Diagnose(ws, host, notes, true), ws[0]
			}
			rep, w := look()
			// Syscall counters may wait on the kernel's tracepoint lock
			// while another look releases its events: try twice more.
			for try := 0; try < 2 && lookFailed(rep); try++ {
				t.Logf("retrying: %v", rep.Notes)
				time.Sleep(3 * time.Second)
				rep, w = look()
			}
			fs := findingsOf(rep, pid)
			t.Logf("%s: %s\nnotes %v%s", tt.behaviour, booksText(w), rep.Notes, describe(fs))
			if got := warnIDs(fs); !slices.Equal(got, tt.warn) {
				t.Errorf("warn-level findings %v, want %v", got, tt.warn)
			}
			if tt.code != "" && !slices.ContainsFunc(fs, func(f Finding) bool {
				return f.Severity >= Warn && slices.ContainsFunc(f.Code, func(c CodeRef) bool { return strings.Contains(c.Func, tt.code) && c.Line > 0 })
			}) {
				t.Errorf("no warn-level cause names %s with its line", tt.code)
			}
			if tt.info != "" && !slices.ContainsFunc(fs, func(f Finding) bool { return f.ID == tt.info && f.Severity == Info }) {
				t.Errorf("%s not found at info level", tt.info)
			}
		})
	}
}
