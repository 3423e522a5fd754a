// Command exporter-cost runs gosleuth exporter, prometheus-process-exporter
// (all processes, grouped by name, threads off) and prometheus-node-exporter
// (defaults) side by side over the same host, in one run:
//
//   - at about -tasks (threads on the host, raised with sleeping processes),
//     each scraped every -scrape interval for -window: CPU (% of a core),
//     RSS, scrape duration p50/p99, series;
//   - gosleuth idle and unscraped: its own wake-ups per second;
//   - under 1,000 short-lived processes a second: series gosleuth adds after
//     a warm-up.
//
// process-exporter reads /proc at scrape time; gosleuth samples every second
// in the background and a scrape writes the last sample. gosleuth runs with
// --doctor-every 0: the doctor's whole-host run (every 5 minutes by default)
// is a separate, periodic cost.
//
// Run it from the repository root (root, Debian's exporters installed):
//
//	go run ./bench/exporter-cost [-tasks 650,3600] [-scrape 15s,1s] [-window 60s]
//
// With -together, each round instead starts every exporter at once and
// scrapes them side by side over the same window, so a busy shared host
// weighs on all alike; -base REV adds gosleuth built from that git
// revision, an A/B of a change in the same run:
//
//	go run ./bench/exporter-cost -together -base HEAD~1 -tasks 650 -scrape 15s -window 100s -only rounds
//
// -bin and -base-bin take binaries built elsewhere (clean checkouts of two
// commits, where the tree holds changes not committed); -base then only
// names the base.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if os.Getenv("EXPORTER_COST_SLEEPER") != "" {
		threadedSleeper()
	}
	tasks := flag.String("tasks", "650,3600", "tasks on the host per round, comma list (sleeping processes are added to reach each)")
	scrapes := flag.String("scrape", "15s,1s", "scrape intervals, comma list")
	window := flag.Duration("window", 60*time.Second, "measuring time per exporter and interval")
	churnFor := flag.Duration("churn", 60*time.Second, "how long the 1,000 processes/s churn runs")
	only := flag.String("only", "rounds,idle,churn", "parts to run, comma list")
	together := flag.Bool("together", false, "start every exporter at once and measure them over the same window")
	base := flag.String("base", "", "with -together, also run gosleuth built from this git revision (A/B)")
	bin := flag.String("bin", "", "run this gosleuth binary instead of building the tree (a clean checkout of a commit)")
	baseBin := flag.String("base-bin", "", "with -together and -base NAME, run this binary as the base instead of building the revision")
	slower := flag.String("intervals", "", "with -together, also run gosleuth exporter sampling at these periods, comma list (e.g. 2s,5s): where its CPU meets node-exporter's")
	sleeper := flag.String("sleepers", "sleep", "what raises the task count: sleep (single-threaded processes) or threads (idle Go processes of about 12 threads, like a host of Go daemons)")
	flag.Parse()
	do := map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		do[p] = true
	}
	// process-exporter is left out where it is not installed (its row is
	// then missing), node-exporter, the goal's yardstick, is not.
	pe, peErr := exec.LookPath("prometheus-process-exporter")
	if peErr != nil {
		fmt.Fprintln(os.Stderr, "exporter-cost: prometheus-process-exporter not installed: its row is left out")
	}
	ne, err := exec.LookPath("prometheus-node-exporter")
	check(err)
	dir, err := os.MkdirTemp("", "exporter-cost-")
	check(err)
	defer os.RemoveAll(dir)
	gs := filepath.Join(dir, "gosleuth")
	if *bin != "" {
		gs = *bin
	} else {
		run("go", "build", "-o", gs, "./cmd/gosleuth")
	}
	cfg := filepath.Join(dir, "pe.yml")
	check(os.WriteFile(cfg, []byte("process_names:\n  - name: \"{{.Comm}}\"\n    cmdline:\n    - '.+'\n"), 0o644))
	exporters := []exporter{
		{"gosleuth exporter", gs, func(p string) []string {
			return []string{"exporter", "--listen", "127.0.0.1:" + p, "--group-by", "exe", "--doctor-every", "0"}
		}},
		// The default reads through the BPF task iterator as root; the
		// same with files only (--bpf=false), in the same run.
		{"gosleuth files", gs, func(p string) []string {
			return []string{"exporter", "--listen", "127.0.0.1:" + p, "--group-by", "exe", "--doctor-every", "0", "--bpf=false"}
		}},
		{"process-exporter", pe, func(p string) []string {
			return []string{"-config.path", cfg, "-threads=false", "-web.listen-address", "127.0.0.1:" + p}
		}},
		{"node-exporter", ne, func(p string) []string { return []string{"--web.listen-address=127.0.0.1:" + p} }},
	}
	if peErr != nil {
		exporters = append(exporters[:2], exporters[3:]...)
	}
	if *together {
		if *base != "" {
			bs := *baseBin
			if bs == "" {
				src := filepath.Join(dir, "base")
				check(os.MkdirAll(src, 0o755))
				run("sh", "-c", "git archive "+*base+" | tar -x -C "+src)
				bs = filepath.Join(dir, "gosleuth-base")
				build := exec.Command("go", "build", "-o", bs, "./cmd/gosleuth")
				build.Dir = src
				if out, err := build.CombinedOutput(); err != nil {
					check(fmt.Errorf("build %s: %v\n%s", *base, err, out))
				}
			}
			b := exporters[0]
			b.name, b.prog = "gosleuth "+*base, bs
			exporters = append(exporters[:1], append([]exporter{b}, exporters[1:]...)...)
		}
	}

	if *together && *slower != "" {
		for _, iv := range strings.Split(*slower, ",") {
			_, err := time.ParseDuration(iv)
			check(err)
			exporters = append(exporters, exporter{"gosleuth " + iv, gs, func(p string) []string {
				return []string{"exporter", "--listen", "127.0.0.1:" + p, "--group-by", "exe", "--doctor-every", "0",
					"--interval", iv, "--idle-every", iv}
			}})
		}
	}

	fmt.Printf("%-6s %-7s %-20s %12s %8s %11s %11s %8s %9s\n", "tasks", "scrape", "exporter", "% of a core", "RSS MB", "scrape p50", "scrape p99", "series", "vs gosl.")
	var sleepers []*exec.Cmd
	for _, f := range strings.Split(*tasks, ",") {
		if !do["rounds"] {
			break
		}
		want, err := strconv.Atoi(f)
		check(err)
		for countTasks() < want {
			c := exec.Command("sleep", "3600")
			if *sleeper == "threads" {
				c = exec.Command(os.Args[0])
				c.Env = append(os.Environ(), "EXPORTER_COST_SLEEPER=1")
			}
			check(c.Start())
			sleepers = append(sleepers, c)
		}
		n := countTasks()
		for _, s := range strings.Split(*scrapes, ",") {
			every, err := time.ParseDuration(s)
			check(err)
			if *together {
				measureTogether(exporters, n, s, every, *window)
				continue
			}
			var base float64
			for i, ex := range exporters {
				r := ex.measure(every, *window)
				ratio := "1.00x"
				if i == 0 {
					base = r.cpuPct
				} else if base > 0 {
					ratio = fmt.Sprintf("%.2fx", r.cpuPct/base)
				}
				fmt.Printf("%-6d %-7s %-20s %12.3f %8.1f %9.1fms %9.1fms %8d %9s\n", n, s, ex.name, r.cpuPct, r.rssMB, r.p50, r.p99, r.series, ratio)
			}
		}
	}
	for _, c := range sleepers {
		c.Process.Kill()
		c.Wait()
	}
	if do["idle"] {
		idle(exporters[0])
	}
	if do["churn"] {
		churnSeries(exporters[0], *churnFor)
	}
}

type exporter struct {
	name, prog string
	args       func(port string) []string
}

func (ex exporter) start() (*exec.Cmd, string) {
	port := freePort()
	c := exec.Command(ex.prog, ex.args(port)...)
	check(c.Start())
	url := "http://127.0.0.1:" + port + "/metrics"
	waitHTTP(url)
	return c, url
}

type result struct {
	cpuPct, rssMB, p50, p99 float64
	series                  int
}

// measure runs the exporter, warms it up for 10 s (gosleuth backs off
// from threads still for 5 s), then scrapes it every
// interval for d and reads its CPU around that.
func (ex exporter) measure(every, d time.Duration) result {
	c, url := ex.start()
	defer func() { c.Process.Kill(); c.Wait() }()
	time.Sleep(10 * time.Second)
	pid := c.Process.Pid
	c0, t0 := cpuNS(pid), time.Now()
	var lat []float64
	series := 0
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		s := time.Now()
		series = len(scrape(url))
		lat = append(lat, float64(time.Since(s).Microseconds())/1000)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	sec := time.Since(t0).Seconds()
	ns := float64(cpuNS(pid) - c0)
	sort.Float64s(lat)
	return result{cpuPct: ns / 1e7 / sec, rssMB: float64(statusKB(pid, "VmHWM:")) / 1024,
		p50: lat[len(lat)/2], p99: lat[min(len(lat)-1, len(lat)*99/100)], series: series}
}

// measureTogether starts every exporter at once, warms them up for 10 s,
// then scrapes each every interval for d (all in the same second) and
// prints one row each over that same window.
func measureTogether(exs []exporter, tasks int, label string, every, d time.Duration) {
	type live struct {
		c        *exec.Cmd
		url      string
		c0       uint64
		lat      []float64
		series   int
		pid      int
		ex       exporter
		switches uint64
	}
	var ls []*live
	for _, ex := range exs {
		c, url := ex.start()
		ls = append(ls, &live{c: c, url: url, pid: c.Process.Pid, ex: ex})
	}
	defer func() {
		for _, l := range ls {
			l.c.Process.Kill()
			l.c.Wait()
		}
	}()
	time.Sleep(10 * time.Second)
	t0 := time.Now()
	for _, l := range ls {
		l.c0, l.switches = cpuNS(l.pid), switches(l.pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for ctx.Err() == nil {
		for _, l := range ls {
			s := time.Now()
			l.series = len(scrape(l.url))
			l.lat = append(l.lat, float64(time.Since(s).Microseconds())/1000)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	sec := time.Since(t0).Seconds()
	var base float64
	for i, l := range ls {
		cpu := float64(cpuNS(l.pid)-l.c0) / 1e7 / sec
		wake := float64(switches(l.pid)-l.switches) / sec
		sort.Float64s(l.lat)
		ratio := "1.00x"
		if i == 0 {
			base = cpu
		} else if base > 0 {
			ratio = fmt.Sprintf("%.2fx", cpu/base)
		}
		fmt.Printf("%-6d %-7s %-20s %12.3f %8.1f %9.1fms %9.1fms %8d %9s  %.1f wake-ups/s\n", tasks, label, l.ex.name, cpu,
			float64(statusKB(l.pid, "VmHWM:"))/1024, l.lat[len(l.lat)/2], l.lat[min(len(l.lat)-1, len(l.lat)*99/100)], l.series, ratio, wake)
	}
}

// threadedSleeper is an idle Go process of about 12 threads: 8 locked to
// goroutines blocked in read(2), plus the runtime's. It never returns.
func threadedSleeper() {
	var fds [2]int
	check(syscall.Pipe(fds[:]))
	for range 8 {
		go func() {
			runtime.LockOSThread()
			var b [1]byte
			syscall.Read(fds[0], b[:])
		}()
	}
	select {}
}

// idle runs the exporter unscraped and counts its wake-ups.
func idle(ex exporter) {
	c, _ := ex.start()
	defer func() { c.Process.Kill(); c.Wait() }()
	time.Sleep(5 * time.Second)
	w0, t0 := switches(c.Process.Pid), time.Now()
	time.Sleep(30 * time.Second)
	w := float64(switches(c.Process.Pid)-w0) / time.Since(t0).Seconds()
	fmt.Printf("\n%s idle and unscraped (1 s sampling): %.1f wake-ups/s (goal <= 5)\n", ex.name, w)
}

// churnSeries starts 1,000 short-lived processes a second for d and counts
// the series the exporter adds after a 10 s warm-up.
func churnSeries(ex exporter, d time.Duration) {
	c, url := ex.start()
	defer func() { c.Process.Kill(); c.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for range 10 { // 10 shells x 2 children per 20 ms = 1,000/s
		sh := exec.CommandContext(ctx, "sh", "-c", "while :; do /bin/true & /bin/true & wait; sleep 0.02; done")
		check(sh.Start())
		go sh.Wait()
	}
	time.Sleep(10 * time.Second)
	warm := scrape(url)
	all := map[string]bool{}
	for k := range warm {
		all[k] = true
	}
	added := map[string]bool{}
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		for k := range scrape(url) {
			if !all[k] {
				added[k] = true
			}
		}
	}
	var names []string
	for k := range added {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Printf("%s under 1,000 short-lived processes/s for %s: %d series after warm-up, %d added after it", ex.name, d, len(warm), len(added))
	if len(names) > 0 {
		fmt.Printf(" (%s)", strings.Join(names[:min(5, len(names))], "; "))
	}
	fmt.Println()
}

// scrape returns the set of series (name and labels) of one scrape.
func scrape(url string) map[string]bool {
	resp, err := http.Get(url)
	check(err)
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			out[l[:i]] = true
		}
	}
	io.Copy(io.Discard, resp.Body)
	return out
}

func countTasks() int {
	ents, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	return len(ents)
}

// statusKB reads a "Field: N kB" line of pid's status.
func statusKB(pid int, field string) int {
	return statusField(fmt.Sprintf("/proc/%d/status", pid), field)
}

func switches(pid int) uint64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n uint64
	for _, t := range tasks {
		n += uint64(statusField(t, "voluntary_ctxt_switches:"))
	}
	return n
}

// statusField reads the number of a "Field: N [kB]" line of a status file.
func statusField(path, field string) int {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// cpuNS is the CPU time of pid's live threads in nanoseconds, summed from
// their schedstat. utime+stime in clock ticks (100 Hz) was too coarse: an
// exporter at 0.05% of a core runs 3 ticks in a 60 s window. The exporters
// measured are Go programs, whose threads do not exit.
func cpuNS(pid int) uint64 {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	check(err)
	var n uint64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that just exited
		}
		v, _ := strconv.ParseUint(strings.Fields(string(b))[0], 10, 64)
		n += v
	}
	return n
}

func run(prog string, args ...string) {
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		check(fmt.Errorf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out))
	}
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func waitHTTP(url string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
	}
	check(fmt.Errorf("%s never answered", url))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "exporter-cost:", err)
		os.Exit(1)
	}
}
