package inspect

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestInspectBoundsStopTheWorld inspects a program with 200,000 goroutines
// whose 1 ms ticker notes its longest gap. By default the goroutine dump,
// which stops the target's world for the whole walk, is skipped with a
// note: the gap stays far below the ~0.5 s a dump costs. Asked for anyway
// (DumpMax -1), the dump happens and the ticker shows the stall: the
// measurement can see what it guards against.
func TestInspectBoundsStopTheWorld(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	p := startPatient(t, "-mode", "many", "-agent")
	gap := func() time.Duration {
		var ns int64
		if err := json.Unmarshal(p.self(t)["MaxTickGapNS"], &ns); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ns)
	}
	// Let the goroutines start, then forget the gaps of the start.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		json.Unmarshal(p.self(t)["NumGoroutine"], &n)
		if n >= 200_000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	gap()

	// The quiet gap is the least, over three default inspections, of the
	// longest tick gap during each: on a shared machine one inspection's
	// window has been seen to include a 171 ms stall of the whole VM (2 ms
	// when alone), which a dump would cause every time and noise does not.
	var quiet time.Duration
	for i := range 3 {
		rep, err := Run(context.Background(), Options{PID: p.pid(), Duration: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if g := gap(); i == 0 || g < quiet {
			quiet = g
		}
		if rep.Dump != nil {
			t.Fatalf("default inspect dumped %d groups of goroutine stacks", len(rep.Dump.Groups))
		}
		if !strings.Contains(strings.Join(rep.Notes, " "), "goroutine dump skipped: 200") {
			t.Fatalf("default inspect did not say it skipped the dump; notes %q", rep.Notes)
		}
	}

	rep, err := Run(context.Background(), Options{PID: p.pid(), Duration: 500 * time.Millisecond, DumpMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	stalled := gap()
	if rep.Dump == nil {
		t.Fatalf("no dump with DumpMax -1: notes %q", rep.Notes)
	}
	t.Logf("longest 1 ms tick gap: %v by default, %v with the dump", quiet, stalled)
	// The bound is far from both: noise on a shared machine stays well
	// below 100 ms, a dump of 200k goroutines stops the world for ~0.5 s.
	if quiet >= 100*time.Millisecond || stalled < 100*time.Millisecond {
		t.Errorf("tick gap %v by default (want < 100ms), %v with the dump (want >= 100ms)", quiet, stalled)
	}
}
