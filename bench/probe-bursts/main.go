// Command probe-bursts measures `gosleuth probe --recipe locks` on a
// program making tens of thousands of slow-path Lock calls a second (the
// probe engine's test patient in slowlock mode: four goroutines on one
// mutex, each Lock counted by the patient): whether the recipe names the
// Lock's caller at its file and line within the default budget, the
// sampled rate against the patient's own count, and the target's CPU in
// the command's window against the mean of equally long windows without
// gosleuth just before and just after it, in the same run of the patient
// (so that the host's load drifts alike on both sides; the difference
// between those two is printed as the control, the host's noise). The
// target's CPU and Lock calls are the patient's own figures (getrusage
// and a counter), read every 20 ms on every side. Root is needed.
//
// Usage: go run ./bench/probe-bursts [-rounds 15] [-duration 2s] [-rounds-under-lock 256]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/proc"
)

func main() {
	rounds := flag.Int("rounds", 15, "rounds (medians are printed)")
	duration := flag.Duration("duration", 2*time.Second, "the probe's window (--duration)")
	hashRounds := flag.Int("rounds-under-lock", 256, "the patient's SHA-256 rounds under the lock (fewer: more Lock calls a second)")
	flag.Parse()
	if err := run(*rounds, *duration, *hashRounds); err != nil {
		fmt.Fprintln(os.Stderr, "probe-bursts:", err)
		os.Exit(1)
	}
}

// patient is the running slowlock patient.
type patient struct {
	cmd   *exec.Cmd
	in    io.Writer
	lines *bufio.Scanner
}

// reading is the target's CPU time (ns, all its threads) and Lock calls
// at one moment, as the patient reports them.
type reading struct {
	cpu   int64
	calls uint64
	at    time.Time
}

// read asks the patient for its Lock calls and CPU time so far.
func (p *patient) read() (reading, error) {
	if _, err := io.WriteString(p.in, "\n"); err != nil {
		return reading{}, err
	}
	if !p.lines.Scan() {
		return reading{}, fmt.Errorf("the patient stopped answering")
	}
	var r reading
	_, err := fmt.Sscanf(p.lines.Text(), "calls %d cpu %d", &r.calls, &r.cpu)
	r.at = time.Now()
	return r, err
}

// watch reads the patient every 20 ms until end is closed, and returns
// the readings, the first taken at once and the last at end.
func (p *patient) watch(end <-chan struct{}) ([]reading, error) {
	var rs []reading
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		x, err := p.read()
		if err != nil {
			return nil, err
		}
		rs = append(rs, x)
		select {
		case <-end:
			x, err := p.read()
			return append(rs, x), err
		case <-tick.C:
		}
	}
}

// after returns a channel closed after d.
func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// over returns the CPU (share of a core) and Lock calls a second between
// two readings.
func over(a, b reading) (cpu, rate float64) {
	sec := b.at.Sub(a.at).Seconds()
	return float64(b.cpu-a.cpu) / 1e9 / sec, float64(b.calls-a.calls) / sec
}

func run(rounds int, duration time.Duration, hashRounds int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root")
	}
	dir, err := os.MkdirTemp("", "probe-bursts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, gs := filepath.Join(dir, "patient"), filepath.Join(dir, "gosleuth")
	for _, b := range [][2]string{{bin, "./internal/probe/testdata/patient"}, {gs, "./cmd/gosleuth"}} {
		if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", b[1], err, out)
		}
	}
	cmd := exec.Command(bin, "-mode", "slowlock", "-rounds", strconv.Itoa(hashRounds))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p := &patient{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
	if !p.lines.Scan() || p.lines.Text() != "ready" {
		return fmt.Errorf("the patient did not start")
	}
	pid := cmd.Process.Pid
	time.Sleep(time.Second) // contention under way
	line := slowLockLine()

	type row struct {
		offCPU, onCPU, runCPU, offRate, onRate, est, margin, duty, toolCPU, costCPU, control float64
		named                                                                                bool
	}
	var rows []row
	for i := range rounds {
		var r row
		// Without gosleuth: a window as long as the command's, the
		// patient asked every 20 ms as while the command runs (answering
		// costs it a little CPU).
		rs, err := p.watch(after(duration))
		if err != nil {
			return err
		}
		offA, offRateA := over(rs[0], rs[len(rs)-1])
		// With it: the target read every 20 ms while the command runs,
		// and the window its JSON reports (start, seconds) cut out of
		// those readings; the whole run (start-up, pre-flight, detach) is
		// reported beside it.
		g := exec.Command(gs, "probe", "--pid", strconv.Itoa(pid), "--recipe", "locks", "--duration", duration.String(), "--format", "json")
		var stdout strings.Builder
		g.Stdout = &stdout
		if err := g.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- g.Wait() }()
		var gerr error
		finished := make(chan struct{})
		go func() { gerr = <-done; close(finished) }()
		rs, err = p.watch(finished)
		if err != nil {
			return err
		}
		if gerr != nil {
			return fmt.Errorf("gosleuth probe: %v", gerr)
		}
		first, last := rs[0], rs[len(rs)-1]
		res := []byte(stdout.String())
		r.runCPU, _ = over(first, last)
		r.toolCPU = (g.ProcessState.UserTime() + g.ProcessState.SystemTime()).Seconds() / last.at.Sub(first.at).Seconds()
		var pr struct {
			probe.Result
			Recipes map[string][]string `json:"recipes"`
		}
		if err := json.Unmarshal(res, &pr); err != nil {
			return fmt.Errorf("gosleuth probe's JSON: %v", err)
		}
		// And again without it, so that the host's drift cancels: the
		// rise is against the mean of the windows before and after, the
		// control the difference between those two.
		rb, err := p.watch(after(duration))
		if err != nil {
			return err
		}
		offB, offRateB := over(rb[0], rb[len(rb)-1])
		r.offCPU, r.offRate, r.control = (offA+offB)/2, (offRateA+offRateB)/2, offB-offA
		r.costCPU = pr.CostCPU
		end := pr.Start.Add(time.Duration(pr.Seconds * 1e9))
		r.onCPU, r.onRate = over(at(rs, pr.Start), at(rs, end))
		for _, f := range pr.Funcs {
			if f.Func != "sync.(*Mutex).lockSlow" {
				continue
			}
			if f.Sampled != nil {
				r.est, r.margin, r.duty = f.PerSec, f.Sampled.PerSecMargin, f.Sampled.Duty
			} else {
				r.est = f.PerSec
			}
			r.named = len(f.Callers) > 0 && f.Callers[0].Func == "main.contend" && f.Callers[0].Line == line &&
				strings.Contains(strings.Join(pr.Recipes["locks"], "\n"), fmt.Sprintf("main.contend (%s:%d)", f.Callers[0].File, line))
		}
		left, err := leftAttached(pid)
		if err != nil {
			return err
		}
		rows = append(rows, r)
		fmt.Printf("round %d: target CPU %.1f%% of a core without (mean of the windows before and after, which differ by %+.2f points), %.1f%% with gosleuth in its window (%+.2f points; %.1f%% over the whole run); Lock slow paths %.0f/s without, %.0f/s with; "+
			"estimated %.0f ± %.0f/s (duty %.1f%%, %+.1f%% against the patient's count); probes' estimated cost %.2f%% of a core; gosleuth's own CPU %.1f%% of a core; caller named at line %d: %v; int3 left: %v\n",
			i+1, 100*r.offCPU, 100*r.control, 100*r.onCPU, 100*(r.onCPU-r.offCPU), 100*r.runCPU, r.offRate, r.onRate, r.est, r.margin, 100*r.duty, 100*(r.est/r.onRate-1), 100*r.costCPU, 100*r.toolCPU, line, r.named, left)
	}
	med := func(f func(row) float64) float64 {
		var v []float64
		for _, r := range rows {
			v = append(v, f(r))
		}
		return median(v)
	}
	named, within := 0, 0
	for _, r := range rows {
		if r.named {
			named++
		}
		if d := r.est - r.onRate; d <= r.margin && -d <= r.margin {
			within++
		}
	}
	off, on := med(func(r row) float64 { return r.offCPU }), med(func(r row) float64 { return r.onCPU })
	rise := med(func(r row) float64 { return r.onCPU - r.offCPU })
	fmt.Printf("\nmedians of %d rounds, one run of the patient:\n", len(rows))
	control := med(func(r row) float64 { return math.Abs(r.control) })
	fmt.Printf("target CPU: %.1f%% of a core without gosleuth, %.1f%% with (x%.3f); rise %+.2f points of a core (median of the rounds' differences; budget 1); "+
		"control: two windows without it differ by %.2f points (median of the absolute differences), the host's noise\n", 100*off, 100*on, on/off, 100*rise, 100*control)
	fmt.Printf("over the command's whole run (start-up, pre-flight, window, detach): %.1f%% of a core (x%.3f)\n", 100*med(func(r row) float64 { return r.runCPU }), med(func(r row) float64 { return r.runCPU })/off)
	perCall := func(cpu, rate float64) float64 { return cpu / rate * 1e9 }
	fmt.Printf("target CPU per slow-path Lock: %.0f ns without, %.0f ns with (x%.3f; medians)\n",
		med(func(r row) float64 { return perCall(r.offCPU, r.offRate) }), med(func(r row) float64 { return perCall(r.onCPU, r.onRate) }),
		med(func(r row) float64 { return perCall(r.onCPU, r.onRate) })/med(func(r row) float64 { return perCall(r.offCPU, r.offRate) }))
	fmt.Printf("Lock slow paths: %.0f/s without, %.0f/s with (x%.3f)\n", med(func(r row) float64 { return r.offRate }), med(func(r row) float64 { return r.onRate }),
		med(func(r row) float64 { return r.onRate })/med(func(r row) float64 { return r.offRate }))
	fmt.Printf("lockSlow estimated %.0f/s ± %.0f (duty %.1f%%); estimate / patient's count x%.3f; within the margin in %d of %d rounds\n",
		med(func(r row) float64 { return r.est }), med(func(r row) float64 { return r.margin }), 100*med(func(r row) float64 { return r.duty }),
		med(func(r row) float64 { return r.est / r.onRate }), within, len(rows))
	fmt.Printf("caller main.contend named at its line in %d of %d rounds; probes' estimated cost %.2f%% of a core; gosleuth's own CPU %.1f%% of a core\n",
		named, len(rows), 100*med(func(r row) float64 { return r.costCPU }), 100*med(func(r row) float64 { return r.toolCPU }))
	return nil
}

// at interpolates the readings (in time order) at t.
func at(rs []reading, t time.Time) reading {
	for i := 1; i < len(rs); i++ {
		if rs[i].at.Before(t) && i < len(rs)-1 {
			continue
		}
		a, b := rs[i-1], rs[i]
		f := 0.0
		if d := b.at.Sub(a.at); d > 0 {
			f = min(max(float64(t.Sub(a.at))/float64(d), 0), 1)
		}
		return reading{cpu: a.cpu + int64(f*float64(b.cpu-a.cpu)), calls: a.calls + uint64(f*float64(b.calls-a.calls)), at: t}
	}
	return rs[len(rs)-1]
}

// slowLockLine is the line of the patient's slow Lock.
func slowLockLine() int {
	b, _ := os.ReadFile("internal/probe/testdata/patient/main.go")
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "// the slow Lock") {
			return i + 1
		}
	}
	return 0
}

// leftAttached reports whether an int3 is left at any of the locks
// recipe's probe points in process pid.
func leftAttached(pid int) (bool, error) {
	t, err := probe.Resolve(proc.NewFS(""), pid)
	if err != nil {
		return false, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, pr := range probe.Recipes["locks"].Probes {
		pt, err := t.Find(pr.Func)
		if err != nil {
			continue // not in this binary
		}
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, int64(pt.Addr)); err != nil {
			return false, err
		}
		if b[0] == 0xcc {
			return true, nil
		}
	}
	return false, nil
}

// median is the middle of v (the upper one of an even count).
func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
