package window

import (
	"math"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

func TestFuncPkg(t *testing.T) {
	for fn, want := range map[string]string{
		"encoding/json.(*decodeState).object": "encoding/json",
		"main.main.func1":                     "main",
		"runtime.AddCleanup[go.shape.struct { Pid int; os.state sync/atomic.Uint32 }]": "runtime",
		"github.com/a/b.F":  "github.com/a/b",
		"[kernel.kallsyms]": "",
	} {
		if got := funcPkg(fn); got != want {
			t.Errorf("funcPkg(%q) = %q, want %q", fn, got, want)
		}
	}
}

func TestSampleHz(t *testing.T) {
	for _, tc := range []struct {
		cores float64
		want  int
	}{
		{0, MaxSampleHz},          // never ran: the rate costs nothing
		{math.NaN(), MaxSampleHz}, // unknown
		{0.05, MaxSampleHz},       // 4000 Hz wanted, clamped
		{0.4, 500},                // 200 samples a second of wall time
		{1, 200},
		{2.5, MinSampleHz}, // 80 Hz wanted: perf's 99 is the floor
		{16, MinSampleHz},  // busy: 99 Hz gives plenty
		{-1, MaxSampleHz},  // a clock step backwards
	} {
		if got := SampleHz(tc.cores); got != tc.want {
			t.Errorf("SampleHz(%v) = %d, want %d", tc.cores, got, tc.want)
		}
	}
}

// TestSummarizeServing: samples under a server's request goroutines count
// as serving, whatever their leaf; others do not.
func TestSummarizeServing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	frames := func(fns ...string) []stacks.SymFrame {
		var out []stacks.SymFrame
		for _, fn := range fns {
			out = append(out, stacks.SymFrame{Frame: stacks.Frame{Func: fn}})
		}
		return out
	}
	p := &stacks.Profile{Raw: &stacks.Raw{Start: t0, End: t0.Add(time.Second)}, Stacks: []stacks.SymStack{
		{Stack: &stacks.Stack{Count: 3}, Frames: frames("compress/flate.(*compressor).deflate", "net/http.HandlerFunc.ServeHTTP", "net/http.serverHandler.ServeHTTP", "net/http.(*conn).serve", "runtime.goexit"), Class: stacks.ClassUser},
		{Stack: &stacks.Stack{Count: 1}, Frames: frames("main.handle", "net/http.(*http2serverConn).runHandler", "runtime.goexit"), Class: stacks.ClassUser},
		{Stack: &stacks.Stack{Count: 6}, Frames: frames("main.loop", "main.main", "runtime.main"), Class: stacks.ClassUser},
	}}
	if got := summarizeStacks(p).Serving; math.Abs(got-0.4) > 1e-9 {
		t.Errorf("serving share %v, want 0.4 (4 of 10 samples under a request goroutine)", got)
	}
}

func TestStdlibFunc(t *testing.T) {
	for fn, want := range map[string]bool{
		"net/http.(*connReader).startBackgroundRead": true,
		"runtime.goexit":                    true,
		"encoding/json.Marshal":             true,
		"main.handleSubmit":                 false,
		"main.(*Notifier).Publish.gowrap1":  false,
		"example.com/q3/jobs.(*Runner).Run": false,
		"github.com/a/b.F[go.shape.int]":    false,
	} {
		if got := StdlibFunc(fn); got != want {
			t.Errorf("StdlibFunc(%q) = %v, want %v", fn, got, want)
		}
	}
}
