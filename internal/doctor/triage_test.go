package doctor

import (
	"testing"
	"time"
)

// TestTriage checks the step that picks close looks on a whole-host run:
// flagged and busy Go processes, busiest first, at most n, quiet ones never.
func TestTriage(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	win := func(pid int, goVer string, cpuSec float64, wakeups uint64) *Window {
		return &Window{PID: pid, Comm: "p", GoVersion: goVer, Start: t0, End: t0.Add(10 * time.Second),
			UserSec: cpuSec, VolCtxsw: wakeups, IOCalls: -1,
			Series: []Point{{T: 0, Threads: 8}, {T: 10, Threads: 8}}}
	}
	h := &Host{CPUs: 2, Start: t0, End: t0.Add(10 * time.Second)}
	quiet := win(10, "go1.26.0", 0.001, 20)   // 2 wake-ups/s, 0.01% CPU
	cQuiet := win(11, "", 0.001, 20)          // not Go, quiet
	ticker := win(12, "go1.26.0", 0.3, 20000) // 2,000 wake-ups/s: flagged
	busyGo := win(13, "go1.26.0", 2, 500)     // 20% of a core
	busyC := win(14, "", 2, 500)              // busy, but no rule and not Go
	for _, tc := range []struct {
		name string
		in   []*Window
		n    int
		want []int
	}{
		{"flagged first", []*Window{quiet, busyGo, ticker, cQuiet, busyC}, 4, []int{12, 13}},
		{"capped", []*Window{quiet, busyGo, ticker}, 1, []int{12}},
		{"none worth it", []*Window{quiet, cQuiet}, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Triage(tc.in, h, tc.n)
			var pids []int
			for _, w := range got {
				pids = append(pids, w.PID)
			}
			if len(pids) != len(tc.want) {
				t.Fatalf("Triage picked %v, want %v", pids, tc.want)
			}
			for i := range pids {
				if pids[i] != tc.want[i] {
					t.Fatalf("Triage picked %v, want %v", pids, tc.want)
				}
			}
		})
	}
}
