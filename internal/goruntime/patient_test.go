//go:build linux

package goruntime

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// TestMain removes the patient built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// buildPatient builds testdata/patient once per test binary.
func buildPatient(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "./testdata/patient")
}

// patient is a running patient process.
type patient struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string
}

// startPatient runs the patient with args (optionally under a wrapper such
// as taskset) and waits for its "ready" line.
func startPatient(t *testing.T, env []string, wrapper []string, args ...string) *patient {
	t.Helper()
	bin := buildPatient(t)
	argv := append(append(append([]string(nil), wrapper...), bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start patient: %v", err)
	}
	p := &patient{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, "ready ") {
			t.Fatalf("patient did not start: %q", l)
		}
		p.addr = strings.TrimPrefix(l, "ready ")
	case <-time.After(30 * time.Second):
		t.Fatal("patient not ready after 30s")
	}
	return p
}

func (p *patient) pid() int { return p.cmd.Process.Pid }

// self asks the patient for its own runtime/metrics reading.
func (p *patient) self(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-p.lines:
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "self ")), &m); err != nil {
			t.Fatalf("patient report %q: %v", l, err)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no report from the patient")
	}
	return nil
}

// selfFloat reads a number from a patient report.
func selfFloat(t *testing.T, m map[string]json.RawMessage, name string) float64 {
	t.Helper()
	var v float64
	if err := json.Unmarshal(m[name], &v); err != nil {
		t.Fatalf("patient report lacks %s: %v", name, err)
	}
	return v
}

// selfHist reads a histogram's counts from a patient report.
func selfHist(t *testing.T, m map[string]json.RawMessage, name string) []uint64 {
	t.Helper()
	var v []uint64
	if err := json.Unmarshal(m[name], &v); err != nil {
		t.Fatalf("patient report lacks %s: %v", name, err)
	}
	return v
}

// selfWindow is the patient's own view of a window, computed here
// independently of NewWindow.
type selfWindow struct {
	sec                       float64
	cycles                    float64
	gcShare, assistShare      float64
	mutexPerSec               float64
	goroutines, numGoroutine  float64
	schedCounts               []uint64
	gomaxprocs, heapLive      float64
	createdPerSec, allocBytes float64
}

func newSelfWindow(t *testing.T, a, b map[string]json.RawMessage) selfWindow {
	d := func(name string) float64 { return selfFloat(t, b, name) - selfFloat(t, a, name) }
	w := selfWindow{sec: d("time") / 1e9}
	w.cycles = d("/gc/cycles/total:gc-cycles")
	busy := d("/cpu/classes/total:cpu-seconds") - d("/cpu/classes/idle:cpu-seconds")
	w.gcShare = d("/cpu/classes/gc/total:cpu-seconds") / busy
	w.assistShare = d("/cpu/classes/gc/mark/assist:cpu-seconds") / busy
	w.mutexPerSec = d("/sync/mutex/wait/total:seconds") / w.sec
	w.createdPerSec = d("/sched/goroutines-created:goroutines") / w.sec
	w.allocBytes = d("/gc/heap/allocs:bytes") / w.sec
	w.goroutines = selfFloat(t, b, "/sched/goroutines:goroutines")
	w.numGoroutine = selfFloat(t, b, "NumGoroutine")
	w.gomaxprocs = selfFloat(t, b, "/sched/gomaxprocs:threads")
	w.heapLive = selfFloat(t, b, "/gc/heap/live:bytes")
	ha, hb := selfHist(t, a, "/sched/latencies:seconds"), selfHist(t, b, "/sched/latencies:seconds")
	w.schedCounts = make([]uint64, len(hb))
	for i := range hb {
		w.schedCounts[i] = hb[i] - ha[i]
	}
	return w
}

// readWindow reads the source over about d, bracketed by the patient's own
// reports, and returns both views.
func readWindow(t *testing.T, p *patient, src Source, d time.Duration) (*Window, selfWindow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+60*time.Second)
	defer cancel()
	sa := p.self(t)
	a, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	b, err := src.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := p.self(t)
	return NewWindow(a, b), newSelfWindow(t, sa, sb)
}

// within reports whether got is within rel (relative) or abs of want.
func within(got, want, rel, abs float64) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= abs || diff <= rel*want
}

// dur prints seconds as a duration, for test logs.
func dur(s float64) string { return time.Duration(s * float64(time.Second)).String() }
