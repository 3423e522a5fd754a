// Command exporter-cost runs gosleuth exporter and prometheus-process-exporter
// side by side over the same host, with N extra sleeping processes, scraped
// once a second like Prometheus would: each exporter's CPU (% of a core and
// per scrape), scrape latency (median and max) and series count, in one run.
// Both group processes by executable name. process-exporter reads /proc at
// scrape time; gosleuth samples every second in the background and a scrape
// writes the last sample. gosleuth runs with --doctor-every 0: the doctor's
// whole-host run (every 5 minutes by default) is a separate, periodic cost.
//
// Run it from the repository root: go run ./bench/exporter-cost [-procs 200,2000].
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
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	procs := flag.String("procs", "200,2000", "extra sleeping processes per round, comma list")
	window := flag.Duration("window", 30*time.Second, "scraping time per exporter and round")
	flag.Parse()
	pe, err := exec.LookPath("prometheus-process-exporter")
	check(err)
	dir, err := os.MkdirTemp("", "exporter-cost-")
	check(err)
	defer os.RemoveAll(dir)
	gs := filepath.Join(dir, "gosleuth")
	run("go", "build", "-o", gs, "./cmd/gosleuth")
	cfg := filepath.Join(dir, "pe.yml")
	check(os.WriteFile(cfg, []byte("process_names:\n  - name: \"{{.Comm}}\"\n    cmdline:\n    - '.+'\n"), 0o644))

	fmt.Printf("%-8s %-28s %12s %14s %12s %12s %8s\n", "procs", "exporter", "% of a core", "CPU ms/scrape", "scrape p50", "scrape max", "series")
	for _, f := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(f)
		check(err)
		var sleepers []*exec.Cmd
		for range n {
			c := exec.Command("sleep", "3600")
			check(c.Start())
			sleepers = append(sleepers, c)
		}
		total := countProcs()
		for _, ex := range []struct {
			name string
			args func(port string) []string
			prog string
		}{
			{"gosleuth exporter", func(p string) []string {
				return []string{"exporter", "--listen", "127.0.0.1:" + p, "--group-by", "exe", "--doctor-every", "0"}
			}, gs},
			{"process-exporter (default)", func(p string) []string {
				return []string{"-config.path", cfg, "-web.listen-address", "127.0.0.1:" + p}
			}, pe},
		} {
			port := freePort()
			c := exec.Command(ex.prog, ex.args(port)...)
			check(c.Start())
			url := "http://127.0.0.1:" + port + "/metrics"
			waitHTTP(url)
			time.Sleep(3 * time.Second)
			r := measure(c.Process.Pid, url, *window)
			c.Process.Kill()
			c.Wait()
			fmt.Printf("%-8d %-28s %12.2f %14.2f %10.1fms %10.1fms %8d\n", total, ex.name, r.cpuPct, r.cpuPerScrape, r.p50, r.max, r.series)
		}
		for _, c := range sleepers {
			c.Process.Kill()
			c.Wait()
		}
	}
}

type result struct {
	cpuPct, cpuPerScrape, p50, max float64
	series                         int
}

// measure scrapes url once a second for d and reads pid's CPU around it.
func measure(pid int, url string, d time.Duration) result {
	c0, t0 := cpuTicks(pid), time.Now()
	var lat []float64
	series := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		s := time.Now()
		resp, err := http.Get(url)
		check(err)
		series = 0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if l := sc.Bytes(); len(l) > 0 && l[0] != '#' {
				series++
			}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, float64(time.Since(s).Microseconds())/1000)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	sec := time.Since(t0).Seconds()
	ticks := float64(cpuTicks(pid) - c0)
	sort.Float64s(lat)
	return result{cpuPct: ticks / sec, cpuPerScrape: ticks * 10 / float64(len(lat)), p50: lat[len(lat)/2], max: lat[len(lat)-1], series: series}
}

func countProcs() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}

// cpuTicks is utime+stime of pid in clock ticks (100 Hz).
func cpuTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
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
