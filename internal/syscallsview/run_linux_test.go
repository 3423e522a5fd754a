//go:build linux

package syscallsview

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// perfFDs is how many perf event descriptors this process holds.
func perfFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// waitReleasers waits, up to 30 s, until no releaser of an earlier run
// (a process started with GOSLEUTH_RELEASE_PERF_FDS=1) is left releasing
// its tracepoints: each release holds the kernel's event_mutex for a grace
// period, so a run attaching beside one takes seconds longer (4 s once in
// a package run), which is the earlier run's release, not this one's.
func waitReleasers(t *testing.T) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		busy := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if b, err := os.ReadFile("/proc/" + e.Name() + "/environ"); err == nil && bytes.Contains(b, []byte("GOSLEUTH_RELEASE_PERF_FDS=1\x00")) {
				busy = true
				break
			}
		}
		if !busy {
			if d := time.Since(start); d > 50*time.Millisecond {
				t.Logf("waited %v for earlier runs' releasers", d.Round(time.Millisecond))
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("earlier runs' releasers still running after 30 s")
}

// TestTeardownIsFast counts every syscall tracepoint (~360, whose release
// costs the kernel a grace period each, about 11 s in all on this VM) and
// requires Run to return within 3 s of its end, both when the command
// exits and when the run is interrupted (SIGTERM cancels the context), and
// every perf descriptor gone from this process when it returns.
func TestTeardownIsFast(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	for _, tc := range []struct {
		name      string
		interrupt bool
	}{{"command exits", false}, {"interrupted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.interrupt {
				waitReleasers(t) // this case's time includes attaching
			}
			before := perfFDs(t)
			cfg := syscalls.Config{Mode: "exact", Command: []string{"/bin/true"}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.interrupt {
				sleeper := exec.Command("sleep", "30")
				if err := sleeper.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
				cfg = syscalls.Config{Mode: "exact", PID: sleeper.Process.Pid, Duration: time.Minute}
			}
			// The command writes its stderr from a goroutine of os/exec:
			// a buffer shared with Run's progress lines would race.
			var out bytes.Buffer
			start := time.Now()
			ended := make(chan time.Time, 1)
			if tc.interrupt {
				go func() {
					time.Sleep(300 * time.Millisecond)
					ended <- time.Now()
					cancel()
				}()
			} else {
				ended <- start
			}
			if err := Run(ctx, cfg, Options{}, &out, io.Discard); err != nil {
				t.Fatalf("run: %v", err)
			}
			if !strings.Contains(out.String(), "total") {
				t.Fatalf("no report: %q", out.String())
			}
			if !strings.Contains(out.String(), ", exact\n") {
				t.Fatalf("not counted exactly: %q", out.String())
			}
			took := time.Since(<-ended)
			t.Logf("returned %v after the end (%v in all)", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if took > 3*time.Second {
				t.Errorf("Run returned %v after the end of counting, want under 3 s", took.Round(time.Millisecond))
			}
			if n := perfFDs(t); n > before {
				t.Errorf("%d perf descriptors open after Run, %d before", n, before)
			}
		})
	}
}
