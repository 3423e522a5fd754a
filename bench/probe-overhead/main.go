// Command probe-overhead measures what a probe on a Go function costs the
// target per call (its thread's CPU time per call, minus the same without a
// probe) for gosleuth's counting and stack modes, bpftrace's uprobe and
// perf probe + perf stat, in one run, and gosleuth's attach and detach
// times. Root, bpftrace and perf are needed (apt-get install bpftrace
// linux-perf); the patient is built unstripped so that bpftrace and perf
// can find main.hit by name.
//
// Usage: go run ./bench/probe-overhead [-window 3s] [-rounds 3]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
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
	window := flag.Duration("window", 3*time.Second, "measuring window per configuration")
	rounds := flag.Int("rounds", 3, "rounds (the median is printed)")
	flag.Parse()
	if err := run(*window, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "probe-overhead:", err)
		os.Exit(1)
	}
}

// patient is the running target and the per-call costs it prints.
type patient struct {
	cmd *exec.Cmd
	ns  chan float64
}

func startPatient(bin string) (*patient, error) {
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &patient{cmd: cmd, ns: make(chan float64, 1024)}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		return nil, fmt.Errorf("patient did not start")
	}
	go func() {
		for sc.Scan() {
			if v, err := strconv.ParseFloat(sc.Text(), 64); err == nil {
				select {
				case p.ns <- v:
				default:
				}
			}
		}
	}()
	return p, nil
}

// measure drains old readings, waits for the window and returns the median
// per-call cost the patient reported in it.
func (p *patient) measure(d time.Duration) float64 {
	for len(p.ns) > 0 {
		<-p.ns
	}
	time.Sleep(300 * time.Millisecond) // the batch under way when the probe came
	for len(p.ns) > 0 {
		<-p.ns
	}
	var vs []float64
	end := time.After(d)
	for {
		select {
		case v := <-p.ns:
			vs = append(vs, v)
		case <-end:
			return median(vs)
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func run(window time.Duration, rounds int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root")
	}
	for _, tool := range []string{"bpftrace", "perf"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing (apt-get install bpftrace linux-perf)", tool)
		}
	}
	dir, err := os.MkdirTemp("", "probe-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "patient")
	if out, err := exec.Command("go", "build", "-o", bin, "./bench/probe-overhead/patient").CombinedOutput(); err != nil {
		return fmt.Errorf("build the patient: %v\n%s", err, out)
	}
	p, err := startPatient(bin)
	if err != nil {
		return err
	}
	defer func() { p.cmd.Process.Kill(); p.cmd.Wait() }()
	pid := p.cmd.Process.Pid

	gosleuth := func(stacks bool) (float64, float64, float64) {
		ctx, cancel := context.WithCancel(context.Background())
		var attach, detach float64
		res := make(chan *probe.Result, 1)
		attached := make(chan struct{})
		go func() {
			r, _ := probe.Run(ctx, proc.NewFS(""), pid, []probe.Probe{{Func: "main.hit", Stacks: stacks}},
				probe.Options{Duration: time.Hour, Budget: -1, Attached: func() { close(attached) }})
			res <- r
		}()
		<-attached
		ns := p.measure(window)
		cancel()
		if r := <-res; r != nil {
			attach, detach = r.AttachMS, r.DetachMS
		}
		return ns, attach, detach
	}
	external := func(name string, args ...string) float64 {
		cmd := exec.Command(name, args...)
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, name, err)
			return 0
		}
		time.Sleep(1500 * time.Millisecond) // attach
		ns := p.measure(window)
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		time.Sleep(500 * time.Millisecond)
		return ns
	}
	perfEvent := ""
	if out, err := exec.Command("perf", "probe", "-x", bin, "-a", "main.hit").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "perf probe: %v: %s\n", err, out)
	} else if m := strings.Fields(string(out)); len(m) > 0 {
		for _, f := range m {
			if strings.HasPrefix(f, "probe_") {
				perfEvent = f
				break
			}
		}
	}
	defer exec.Command("perf", "probe", "-d", "probe_patient:*").Run()

	type row struct{ base, count, stacks, bpftrace, perf, attach, detach []float64 }
	var r row
	for i := range rounds {
		r.base = append(r.base, p.measure(window))
		c, a, d := gosleuth(false)
		r.count, r.attach, r.detach = append(r.count, c), append(r.attach, a), append(r.detach, d)
		s, _, _ := gosleuth(true)
		r.stacks = append(r.stacks, s)
		r.bpftrace = append(r.bpftrace, external("bpftrace", "-e", "uprobe:"+bin+":main.hit { @ = count(); }"))
		if perfEvent != "" {
			r.perf = append(r.perf, external("perf", "stat", "-e", perfEvent, "-p", strconv.Itoa(pid)))
		}
		fmt.Printf("round %d: base %.1f ns, gosleuth count %.1f, stacks %.1f, bpftrace %.1f, perf %v ns per call\n",
			i+1, r.base[i], r.count[i], r.stacks[i], r.bpftrace[i], r.perf)
	}
	// The governor's bound: the target's CPU over a window with the default
	// budget, against the same window without a probe. main.hit runs
	// about a million times a second here: too hot, refused after a short
	// pre-flight.
	var plain, governed []float64
	for range rounds {
		c0 := cpuNS(pid)
		time.Sleep(2 * time.Second)
		plain = append(plain, float64(cpuNS(pid)-c0)/2e9)
		c0 = cpuNS(pid)
		t0 := time.Now()
		pr, _ := probe.Run(context.Background(), proc.NewFS(""), pid, []probe.Probe{{Func: "main.hit", Stacks: true}},
			probe.Options{Duration: 2 * time.Second})
		// Over the whole window, though Run returns at once when it
		// refuses every function.
		time.Sleep(time.Until(t0.Add(2 * time.Second)))
		governed = append(governed, float64(cpuNS(pid)-c0)/time.Since(t0).Seconds()/1e9)
		if pr != nil && len(pr.Funcs) > 0 && pr.Funcs[0].Skipped != "" {
			fmt.Printf("default budget: main.hit %s\n", pr.Funcs[0].Skipped)
		}
	}
	fmt.Printf("target CPU over a 2 s window: %.2f%% of a core without a probe, %.2f%% with gosleuth's default budget (+%.2f points; goal <= 1)\n",
		100*median(plain), 100*median(governed), 100*(median(governed)-median(plain)))

	base := median(r.base)
	hit := func(v []float64) float64 { return median(v) - base }
	g := hit(r.count)
	fmt.Printf("\nper hit (target thread CPU per call minus %.1f ns without a probe; medians of %d rounds, one run):\n", base, rounds)
	fmt.Printf("gosleuth counting   %7.0f ns  1.00x\n", g)
	fmt.Printf("gosleuth stacks     %7.0f ns  %.2fx\n", hit(r.stacks), hit(r.stacks)/g)
	fmt.Printf("bpftrace uprobe     %7.0f ns  %.2fx\n", hit(r.bpftrace), hit(r.bpftrace)/g)
	if len(r.perf) > 0 {
		fmt.Printf("perf probe + stat   %7.0f ns  %.2fx\n", hit(r.perf), hit(r.perf)/g)
	}
	fmt.Printf("gosleuth attach %.1f ms, detach %.1f ms (medians)\n", median(r.attach), median(r.detach))
	return nil
}

// cpuNS is the CPU time of every thread of pid, in ns (schedstat).
func cpuNS(pid int) int64 {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n int64
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			n += v
		}
	}
	return n
}
