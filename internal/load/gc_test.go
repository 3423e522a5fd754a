package load

import (
	"context"
	"expvar"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
)

// TestWatchGC: with a runtime source (here this process's own pprof and
// expvar endpoints), every step reports the target's GC cycles.
func TestWatchGC(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.Handle("/debug/vars", expvar.Handler())
	dbg := httptest.NewServer(mux)
	defer dbg.Close()
	ctx := context.Background()
	src, _, err := goruntime.Connect(ctx, os.Getpid(), goruntime.Options{PprofURL: dbg.URL})
	if err != nil {
		t.Fatalf("connect to the pprof source: %v", err)
	}
	defer src.Close()
	_, u := serve(t, hello)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a GC every 50 ms
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				runtime.GC()
			}
		}
	}()
	timed(t, 2, 8*time.Second, func() (probs []string, late bool) {
		s := runStep(t, Config{URL: u, Connections: 2, Watch: os.Getpid(), GC: src, Warmup: testTick}, 50, 2*time.Second)
		tg := s.Target
		if tg == nil || tg.GCCycles == nil {
			t.Fatalf("no GC figures: %+v", tg)
		}
		if tg.GCSource == "" || tg.GCNote != "" {
			t.Fatalf("source %q note %q", tg.GCSource, tg.GCNote)
		}
		// About 35 in the window; the readings come from another goroutine
		// and may lag a tick behind, and a loaded machine delays the GCs.
		if *tg.GCCycles < 5 {
			problem(&probs, "%d GC cycles in %.2fs with one every 50 ms", *tg.GCCycles, s.Seconds)
		}
		return probs, s.GeneratorLate
	})
}
