//go:build linux

package load

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// spiky starts testdata/spiky, a server whose P99 spikes come from cause
// (gc, lock or sleep), and returns its PID and URL.
func spiky(t testing.TB, cause string) (int, *url.URL) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	name := "spiky -cause " + cause
	cmd := exec.Command(testbin.Build(t, "./testdata/spiky"), "-cause", cause)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("patient %s did not start", name)
	}
	addr, ok := strings.CutPrefix(sc.Text(), "listening on ")
	if !ok {
		t.Fatalf("patient %s: %q", name, sc.Text())
	}
	u, err := url.Parse("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, u
}

// gcRun loads the server pid serves at u at 1000 requests a second for d,
// watching it (its GC clock read from its memory), and returns the report
// and its text.
func gcRun(t *testing.T, pid int, u *url.URL, d time.Duration) (*Report, string) {
	t.Helper()
	rep, err := Run(context.Background(), Config{URL: u, Connections: 20, Watch: pid}, Plan{Rate: 1000, Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return rep, b.String()
}

// TestGCSpikesTied: on a server whose P99 spikes come from GC bursts (a
// cache of many pointer-rich entries that expires at once and is filled
// again), the spikes fall within the GC cycles read from its memory, and
// the report says so in one line, with the assist share; the HTML page
// draws the cycles.
func TestGCSpikesTied(t *testing.T) {
	testenv.Timing(t)
	pid, u := spiky(t, "gc")
	timed(t, 3, 2*time.Minute, func() (probs []string, late bool) {
		rep, text := gcRun(t, pid, u, 15*time.Second)
		late = rep.Steps[0].GeneratorLate
		g := rep.GCSpikes
		if g == nil {
			t.Fatalf("no GC clock on a Go server: notes %q", rep.Notes)
		}
		t.Logf("%d of %d spikes in GC (%.1f by chance, p %.2g), %d cycles (%d starts read), GC %.0f%% of the time, %d polls",
			g.InGC, g.Spikes, g.Expected, g.PValue, g.Cycles, g.CyclesStartRead, 100*g.GCTimeShare, g.Polls)
		if !g.Tied {
			problem(&probs, "spikes not tied to GC: %d of %d in GC cycles, %.1f by chance, p %.2g", g.InGC, g.Spikes, g.Expected, g.PValue)
			return probs, late
		}
		if !strings.Contains(text, "target GC: ") || !strings.Contains(text, "P99 spikes fall within GC cycles (assist ") {
			problem(&probs, "tied, but the text has no such line:\n%s", text)
		}
		if g.AssistShare == nil || *g.AssistShare <= 0 || *g.AssistShare >= 1 {
			problem(&probs, "assist share %v in the spikes' cycles", g.AssistShare)
		}
		if g.Cycles < 5 || 2*g.CyclesStartRead < g.Cycles || g.PollFailures > 0 {
			problem(&probs, "%d cycles, %d with their start read, %d failed polls", g.Cycles, g.CyclesStartRead, g.PollFailures)
		}
		var h bytes.Buffer
		rep.WriteHTML(&h)
		if !strings.Contains(h.String(), "GC cycles") || !strings.Contains(h.String(), "P99 spikes") {
			problem(&probs, "the HTML page does not draw the cycles and spikes")
		}
		var j bytes.Buffer
		rep.WriteJSON(&j, false)
		var back struct {
			GC *GCSpikes `json:"gc_spikes"`
		}
		if err := json.Unmarshal(j.Bytes(), &back); err != nil || back.GC == nil || !back.GC.Tied || back.GC.GCCycles != nil {
			problem(&probs, "JSON gc_spikes %+v (%v): want the tie, without the cycle list", back.GC, err)
		}
		return probs, late
	})
}

// TestGCSpikesNotTied: on servers whose P99 spikes come from a lock held
// periodically or from a periodic sleep in the handler, the spikes are
// found and not tied to GC, and the text says nothing of GC.
func TestGCSpikesNotTied(t *testing.T) {
	for _, cause := range []string{"lock", "sleep"} {
		t.Run(cause, func(t *testing.T) {
			pid, u := spiky(t, cause)
			rep, text := gcRun(t, pid, u, 8*time.Second)
			g := rep.GCSpikes
			if g == nil {
				t.Fatalf("no GC clock on a Go server: notes %q", rep.Notes)
			}
			t.Logf("%d of %d spikes in GC (%.1f by chance, p %.2g), %d cycles, GC %.1f%% of the time",
				g.InGC, g.Spikes, g.Expected, g.PValue, g.Cycles, 100*g.GCTimeShare)
			// A spike every 700 ms over some 7 measured seconds.
			if g.Spikes < 5 {
				t.Errorf("%d spikes on a server stalling every 700 ms", g.Spikes)
			}
			if g.Tied || strings.Contains(text, "fall within GC cycles") {
				t.Errorf("spikes from a %s tied to GC: %s\n%s", cause, g.Summary, text)
			}
		})
	}
}

// BenchmarkGCClockIdle is what polling a server's GC clock costs
// gosleuth, at the default period and at 25 ms: its process's CPU over a
// second of polling with nothing else running, against a second without
// (cpu-ms/s, each).
func BenchmarkGCClockIdle(b *testing.B) {
	pid, _ := spiky(b, "lock")
	for _, period := range []time.Duration{DefaultGCPoll, 25 * time.Millisecond} {
		b.Run(period.String(), func(b *testing.B) {
			var with, without time.Duration
			for b.Loop() {
				c0 := selfCPU()
				time.Sleep(time.Second)
				without += selfCPU() - c0
				c, err := openGCClock("", pid, period, func() int64 { return 0 })
				if err != nil {
					b.Fatal(err)
				}
				c1 := selfCPU() // the polling alone, not the opening
				time.Sleep(time.Second)
				c.close()
				with += selfCPU() - c1
			}
			b.ReportMetric(float64(with)/1e6/float64(b.N), "polling-cpu-ms/s")
			b.ReportMetric(float64(without)/1e6/float64(b.N), "idle-cpu-ms/s")
		})
	}
}

// TestGCClockTargetExits: when the target exits during the run, the GC
// clock stops after maxFailsInRow failed reads and the figures say so.
func TestGCClockTargetExits(t *testing.T) {
	pid, u := spiky(t, "lock")
	go func() {
		time.Sleep(1500 * time.Millisecond)
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}()
	rep, err := Run(context.Background(), Config{URL: u, Connections: 4, Watch: pid, Timeout: time.Second},
		Plan{Rate: 100, Duration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g := rep.GCSpikes
	if g == nil || g.Polls == 0 || g.PollFailures != maxFailsInRow || !strings.Contains(g.Note, "reads of the GC clock failed") {
		t.Errorf("GC figures after the target exited: %+v", g)
	}
}
