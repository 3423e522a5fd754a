//go:build linux

package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/window"
)

// switches sums the context switches of every thread of pid.
func switches(t *testing.T, pid int) uint64 {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no tasks for %d: %v", pid, err)
	}
	var n uint64
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

func startIdle(t *testing.T, bin string, args ...string) int {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-mode", "idle"}, args...)...)
	// SIGTERM lets the patient close its agent and remove its socket.
	return testbin.Start(t, cmd, testbin.Options{Ready: func(l string) bool { return strings.HasPrefix(l, "ready") },
		Stop: syscall.SIGTERM}).PID()
}

// TestIdleWakeups: an idle program with the agent wakes up no more often
// than the same program without it, also after the agent has served reads;
// and serving a metrics read stops the program's world zero times.
func TestIdleWakeups(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 10 s")
	}
	bin := filepath.Join(t.TempDir(), "patient")
	if out, err := exec.Command("go", "build", "-o", bin, "../internal/goruntime/testdata/patient").CombinedOutput(); err != nil {
		t.Fatalf("build patient: %v\n%s", err, out)
	}
	plain := startIdle(t, bin)
	withAgent := startIdle(t, bin, "-agent")

	// Serve reads first, then let the connection go.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	src, notes, err := goruntime.Connect(ctx, withAgent, goruntime.Options{})
	if err != nil {
		t.Fatalf("connect: %v %q", err, notes)
	}
	first, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const reads = 200
	lat := make([]time.Duration, reads)
	for i := range lat {
		t0 := time.Now()
		if _, err := src.Read(ctx); err != nil {
			t.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	last, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	// Stop-the-world pauses outside GC during the reads (GC is idle here).
	stw := window.HistogramBetween(first.Raw["/sched/pauses/total/other:seconds"].Hist, last.Raw["/sched/pauses/total/other:seconds"].Hist)
	gcs := last.GCCycles - first.GCCycles
	t.Logf("%d metrics reads over the socket: median %s, p99 %s; non-GC stop-the-world pauses during them: %d; GC cycles: %d",
		reads, lat[reads/2], lat[reads*99/100], stw.Total(), gcs)
	if stw.Total() != 0 {
		t.Errorf("serving metrics stopped the world %d times", stw.Total())
	}

	time.Sleep(500 * time.Millisecond) // let the server side of the connection finish
	const window = 4 * time.Second
	p0, a0 := switches(t, plain), switches(t, withAgent)
	time.Sleep(window)
	p1, a1 := switches(t, plain), switches(t, withAgent)
	pr, ar := float64(p1-p0)/window.Seconds(), float64(a1-a0)/window.Seconds()
	t.Logf("idle wake-ups: without agent %.2f/s, with agent %.2f/s", pr, ar)
	if ar > pr+0.5 {
		t.Errorf("the agent adds wake-ups: %.2f/s with, %.2f/s without", ar, pr)
	}
}
