package doctor

import (
	"slices"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/window"
)

// TestProbesNameTheTicker: a 1 ms ticker's loop is almost never on CPU, so
// stack samples rarely catch it; the probe look counts its channel
// receives exactly and the idle-wakeups finding names the loop from probes.
func TestProbesNameTheTicker(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF, testenv.Uprobes)
	p := startPatient(t, "ticker")
	rep := diagnose(t, p.pid, 3*time.Second, window.ProbesLook{})
	var f *Finding
	for _, x := range findingsOf(rep, p.pid) {
		if x.ID == "idle-wakeups" {
			f = &x
		}
	}
	if f == nil {
		t.Fatalf("no idle-wakeups finding: %+v", findingsOf(rep, p.pid))
	}
	t.Logf("code: %+v", f.Code)
	if !slices.ContainsFunc(f.Code, func(c CodeRef) bool {
		return c.From == "probes" && c.Func == "main.main.func1" && c.Line > 0
	}) {
		t.Errorf("idle-wakeups code %+v: want the ticker loop named from probes", f.Code)
	}
}
