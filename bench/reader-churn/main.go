//go:build linux

// Command reader-churn measures the /proc engine's steady-state cost per
// refresh as `gosleuth top` (or, with -view exporter, the exporter)
// configures it, reading files only and with the
// BPF task iterator, side by side (the two readers alternate within each
// refresh), on a quiet host and under 5,000 short-lived processes a second
// (50 shells each forking two /bin/true and sleeping 20 ms, as
// bench/faults does). Each figure is the median over the refreshes after
// a warm-up of the reading thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so
// start-up costs (the iterator's 30 ms of BTF and verifier) stay out.
//
// Needs root (the iterator).
// Usage: go run ./bench/reader-churn [-view top|exporter] [-refreshes 40] [-every 500ms]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// options are the view's reader options, without TasksFromBPF.
var options proc.Options

// threadCPU is the calling thread's CPU time. CLOCK_THREAD_CPUTIME_ID
// adds the time since the thread was last accounted; getrusage's
// RUSAGE_THREAD does not, so a refresh that never blocks reads as 0 unless
// a scheduler tick (4 ms at HZ=250) falls inside it.
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

func main() {
	refreshes := flag.Int("refreshes", 40, "refreshes measured per reader and phase (after 4 of warm-up)")
	every := flag.Duration("every", 500*time.Millisecond, "time between refreshes")
	view := flag.String("view", "top", "whose reader options: top or exporter")
	flag.Parse()
	switch *view {
	case "top":
		// internal/top's whole-host reader.
		options = proc.Options{SkipKernelThreads: true, DeferNew: true, SwitchesFromTaskstats: true}
	case "exporter":
		// internal/export's reader at the default --idle-every 5s, 1 s interval.
		options = proc.Options{SkipKernelThreads: true, IdleBackoff: 5, SwitchesOnly: true, SkipIO: true, SkipCmdline: true,
			NewPIDsOnly: true, IdleStatEvery: 3, RanFromTaskstats: true}
	default:
		fmt.Fprintln(os.Stderr, "reader-churn: -view is top or exporter")
		os.Exit(2)
	}
	runtime.LockOSThread()
	quiet := measure(*refreshes, *every)
	var shells []*exec.Cmd
	for range 50 {
		c := exec.Command("sh", "-c", "while :; do /bin/true & /bin/true & wait; sleep 0.02; done")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "reader-churn:", err)
			os.Exit(1)
		}
		shells = append(shells, c)
	}
	time.Sleep(time.Second)
	churn := measure(*refreshes, *every)
	// Killed and waited for before exiting: a context's kill would race
	// with the exit and leave the shells forking.
	for _, c := range shells {
		c.Process.Kill()
		c.Wait()
	}
	fmt.Printf("%-8s %12s %12s %8s\n", "reader", "quiet ms", "churn ms", "churn/quiet")
	for i, name := range []string{"files", "bpf"} {
		fmt.Printf("%-8s %12.2f %12.2f %8.2fx\n", name, quiet[i], churn[i], churn[i]/quiet[i])
	}
	fmt.Printf("bpf/files: quiet %.2fx, churn %.2fx\n", quiet[1]/quiet[0], churn[1]/churn[0])
}

// measure returns the median milliseconds of CPU a refresh for the files
// reader and the iterator reader, read alternately.
func measure(n int, every time.Duration) [2]float64 {
	var readers [2]*proc.Reader
	for i, bpf := range []bool{false, true} {
		o := options
		o.TasksFromBPF = bpf
		r, err := proc.NewReader(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "reader-churn:", err)
			os.Exit(1)
		}
		defer r.Close()
		readers[i] = r
	}
	var snaps [2]proc.Snapshot
	var ms [2][]float64
	var opens, reads, changed [2][]float64
	for k := 0; k < n+4; k++ {
		for i, r := range readers {
			t0 := threadCPU()
			if err := r.Snapshot(&snaps[i]); err != nil {
				fmt.Fprintln(os.Stderr, "reader-churn:", err)
				os.Exit(1)
			}
			if k >= 4 {
				ms[i] = append(ms[i], float64(threadCPU()-t0)/1e6)
				st := &snaps[i].Stats
				opens[i] = append(opens[i], float64(st.Opens))
				reads[i] = append(reads[i], float64(st.Reads))
				changed[i] = append(changed[i], float64(st.Changed))
			}
		}
		time.Sleep(every)
	}
	if off := snaps[1].Stats.TasksFromBPFOff; off != "" {
		fmt.Fprintln(os.Stderr, "reader-churn: the iterator is off:", off)
		os.Exit(1)
	}
	var med [2]float64
	for i := range ms {
		med[i] = median(ms[i])
	}
	fmt.Printf("%d processes, %d threads: files %.2f ms, bpf %.2f ms a refresh (medians of %d)\n",
		len(snaps[1].Procs), len(snaps[1].Tasks), med[0], med[1], n)
	for i, name := range []string{"files", "bpf"} {
		fmt.Printf("  %-6s a refresh: %.0f opens, %.0f reads, %.0f threads that ran\n",
			name, median(opens[i]), median(reads[i]), median(changed[i]))
	}
	return med
}

// median sorts v and returns its middle value.
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
