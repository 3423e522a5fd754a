package profileview

import (
	"bytes"
	"testing"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// TestSummaryGolden pins the profile summary's text and JSON for a summary
// built in the test (one function name carries an escape sequence, as a
// hostile binary's may).
func TestSummaryGolden(t *testing.T) {
	procCPU, user, sys, cov := 2.9, 1.9, 1.0, 1.03
	s := &stacks.Summary{PID: 4242, Exe: "/usr/local/bin/svc", Seconds: 30, Hz: 99, Samples: 2970, Lost: 3, Threads: 9,
		NewThreads: 2, PickupMaxMS: 0.4, SampledCPU: 3.0, ProcCPU: &procCPU, ProcUser: &user, ProcSystem: &sys, Coverage: &cov,
		KernelShare: 0.34, UserShare: 0.41, Classes: map[string]float64{"user": 0.41, "syscall": 0.3, "gc background marking": 0.2, "scheduler": 0.09},
		Top:              []stacks.TopFunc{{Function: "crypto/sha256.blockSHANI", FlatShare: 0.22, CumShare: 0.22}, {Function: "evil\x1b]0;x\x07", FlatShare: 0.01, CumShare: 0.01}},
		TopCum:           []stacks.TopFunc{{Function: "main.handle", FlatShare: 0.02, CumShare: 0.61}},
		LeafCallersFixed: 12, GoFrames: 9000, GoFramesUnresolved: 0, Notes: []string{"kernel mode was sampled"}}
	var text, js bytes.Buffer
	if err := WriteSummaryText(&text, s); err != nil {
		t.Fatal(err)
	}
	if err := WriteSummaryJSON(&js, s); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "summary.txt", text.Bytes())
	golden.Check(t, "summary.json", js.Bytes())
}
