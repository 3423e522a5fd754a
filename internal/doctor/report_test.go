package doctor

import (
	"bytes"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
)

// goldenReport is a report from windows built in the test: a 1 ms ticker
// (warn, with syscall evidence), a process with an escape sequence in its
// name, and an exited one, over a fixed host.
func goldenReport() *Report {
	ticker := win(10, func(w *Window) {
		w.PID, w.Comm = 4242, "ticker"
		w.VolCtxsw = 20000
		w.UserSec, w.SysSec = 0.06, 0.14
		w.IOCalls = 5
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 9500, "epoll_pwait": 4000, "nanosleep": 500}}
	})
	evil := win(10, func(w *Window) {
		w.PID, w.Comm = 4343, "evil\x1b[2J"
		w.UserSec, w.SysSec = 0.9, 0.1
	})
	gone := win(10, func(w *Window) {
		w.PID, w.Comm, w.Exited = 4444, "gone", true
	})
	// Eight goroutines on one mutex: the lock is the cause, and the
	// wake-ups and kernel time are its symptoms, not a timer loop.
	locked := win(10, func(w *Window) {
		w.PID, w.Comm = 4545, "locked"
		w.VolCtxsw = 150000
		w.UserSec, w.SysSec = 1.5, 3
		w.IOCalls = 5
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 195000, "nanosleep": 20000}}
		w.Stacks = &Stacks{Samples: 400, KernelShare: 0.6,
			Classes:     map[string]float64{ClassUserCode: 0.1, ClassLock: 0.08, ClassScheduler: 0.05},
			KernelPaths: []Share{{Name: "syscall futex", Share: 0.5}, {Name: "syscall nanosleep", Share: 0.1}},
			Sites: map[string][]Site{ClassLock: {
				{Func: "main.(*cache).get", File: "/src/app/cache.go", Line: 41, Share: 0.06},
				{Func: "main.(*cache).put", File: "/src/app/cache.go", Line: 57, Share: 0.02},
			}},
		}
	})
	t0 := time.Unix(1000, 0)
	h := &Host{CPUs: 2, Procs: 4, Tasks: 26, Start: t0, End: t0.Add(10 * time.Second), Root: true}
	return Diagnose([]*Window{ticker, evil, gone, locked}, h, []string{"tracefs mounted by gosleuth"}, true)
}

func TestReportGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(*Report, *bytes.Buffer) error
	}{
		{"report.txt", func(r *Report, b *bytes.Buffer) error { return r.WriteText(b, false) }},
		{"report-colour.txt", func(r *Report, b *bytes.Buffer) error { return r.WriteText(b, true) }},
		{"report.md", func(r *Report, b *bytes.Buffer) error { return r.WriteMarkdown(b) }},
		{"report.json", func(r *Report, b *bytes.Buffer) error { return r.WriteJSON(b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(goldenReport(), &b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, b.Bytes())
		})
	}
}
