package window

import (
	"math"
	"testing"
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
