// Command load-vs-peers compares gosleuth load with wrk, vegeta and hey on
// one machine, in one run: the same Go hello server pinned to one core, each
// generator pinned to the other.
//
// Scenarios (each tool, each round, rounds interleaved):
//
//   - closed: as fast as 50 connections allow (gosleuth --rate max, wrk -t1,
//     vegeta -rate=0 -max-workers=50, hey -c 50): requests per second and
//     requests per generator CPU-second;
//   - fixed rates (default 5000 and 20000/s; gosleuth --rate, vegeta
//     -rate -max-workers=50, hey -q RATE/50 per worker; wrk has no fixed
//     rate): the share of the target the server received.
//
// Requests and connections are counted by the server, CPU and max RSS from
// the generator's rusage, and "bg" is the CPU used on the machine outside
// the generator and the server (the machine is shared).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	serve := flag.String("serve", "", "run the hello server on `ADDR` (used by the harness itself)")
	statsAddr := flag.String("stats", "", "with -serve: serve the counters on `ADDR`")
	duration := flag.Duration("duration", 30*time.Second, "length of each run")
	rounds := flag.Int("rounds", 3, "rounds (medians are reported)")
	conns := flag.Int("conns", 50, "connections for every tool")
	rates := flag.String("rates", "5000,20000", "fixed rates to test (comma list)")
	tools := flag.String("tools", "gosleuth,wrk,vegeta,hey", "tools to run")
	genCPU := flag.Int("gen-cpu", 0, "CPU for the generators")
	srvCPU := flag.Int("srv-cpu", 1, "CPU for the server")
	flag.Parse()
	if *serve != "" {
		runServer(*serve, *statsAddr)
		return
	}
	if err := run(*duration, *rounds, *conns, *rates, *tools, *genCPU, *srvCPU); err != nil {
		fmt.Fprintln(os.Stderr, "load-vs-peers:", err)
		os.Exit(1)
	}
}

// ---- the server ----

type serverStats struct {
	Requests    int64 `json:"requests"`
	ConnsOpened int64 `json:"conns_opened"`
	PeakOpen    int64 `json:"peak_open"`
}

// runServer serves "hello" on addr and its counters on statsAddr, a
// listener of its own so that reading them opens no connection on addr.
func runServer(addr, statsAddr string) {
	var reqs, opened, open, peak atomic.Int64
	stats := http.NewServeMux()
	stats.HandleFunc("/__stats", func(w http.ResponseWriter, r *http.Request) {
		s := serverStats{Requests: reqs.Load(), ConnsOpened: opened.Load(), PeakOpen: peak.Load()}
		if r.URL.Query().Get("reset") == "1" {
			peak.Store(open.Load())
		}
		json.NewEncoder(w).Encode(s)
	})
	go func() {
		if err := http.ListenAndServe(statsAddr, stats); err != nil {
			fmt.Fprintln(os.Stderr, "stats server:", err)
			os.Exit(1)
		}
	}()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.Add(1)
		w.Write([]byte("hello\n"))
	})
	srv := &http.Server{Addr: addr, Handler: hello, ConnState: func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			opened.Add(1)
			n := open.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func getStats(base string, reset bool) (serverStats, error) {
	var s serverStats
	u := base + "/__stats"
	if reset {
		u += "?reset=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// ---- CPU accounting ----

func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100
}

// busyCPU returns the machine's busy CPU-seconds so far (all CPUs).
func busyCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)[1:]
	var busy float64
	for i, v := range f {
		x, _ := strconv.ParseFloat(v, 64)
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy / 100
}

// ---- the tools ----

type result struct {
	tool, scenario string
	target         float64
	served         int64 // requests the server counted
	reqPerSec      float64
	cpu            float64 // generator CPU-seconds
	rssMB          float64
	opened, peak   int64
	srvCPU, bg     float64
	note           string
	p99            string // the tool's own p99 when easy to read
}

func toolArgs(bin map[string]string, tool, url string, rate float64, d time.Duration, conns int) []string {
	secs := strconv.Itoa(int(d.Seconds()))
	switch tool {
	case "gosleuth":
		r := "max"
		if rate > 0 {
			r = strconv.FormatFloat(rate, 'f', -1, 64)
		}
		return []string{bin[tool], "load", url, "--rate", r, "--duration", d.String(), "--connections",
			strconv.Itoa(conns), "--format", "json", "--watch", "-1", "--quiet"}
	case "wrk":
		return []string{bin[tool], "-t1", "-c" + strconv.Itoa(conns), "-d" + secs + "s", "--latency", url}
	case "vegeta":
		r := "0"
		if rate > 0 {
			r = strconv.FormatFloat(rate, 'f', -1, 64) + "/s"
		}
		return []string{bin[tool], "attack", "-targets", bin["targets"], "-rate=" + r, "-max-workers=" + strconv.Itoa(conns),
			"-workers=" + strconv.Itoa(conns), "-duration=" + d.String(), "-output", os.DevNull}
	case "hey":
		a := []string{bin[tool], "-z", secs + "s", "-c", strconv.Itoa(conns)}
		if rate > 0 {
			a = append(a, "-q", strconv.FormatFloat(rate/float64(conns), 'f', -1, 64))
		}
		return append(a, url)
	}
	return nil
}

func runTool(bin map[string]string, tool, scenario, base, statsBase string, rate float64, d time.Duration, conns, cpu, srvPID int) (result, error) {
	r := result{tool: tool, scenario: scenario, target: rate}
	args := toolArgs(bin, tool, base+"/", rate, d, conns)
	cmd := exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu)}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	before, err := getStats(statsBase, true)
	if err != nil {
		return r, fmt.Errorf("server stats: %w", err)
	}
	srv0, busy0 := procCPU(srvPID), busyCPU()
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("%s: %w\n%s", tool, err, lastLines(out.String(), 10))
	}
	elapsed := time.Since(start).Seconds()
	after, err := getStats(statsBase, false)
	if err != nil {
		return r, fmt.Errorf("server stats: %w", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	r.rssMB = float64(ru.Maxrss) / 1024
	r.served = after.Requests - before.Requests
	r.reqPerSec = float64(r.served) / d.Seconds()
	r.opened = after.ConnsOpened - before.ConnsOpened
	r.peak = after.PeakOpen
	r.srvCPU = procCPU(srvPID) - srv0
	r.bg = busyCPU() - busy0 - r.cpu - r.srvCPU
	if elapsed > d.Seconds()*1.5+5 {
		r.note = fmt.Sprintf("took %.0fs", elapsed)
	}
	if tool == "gosleuth" {
		var rep struct {
			Steps []struct {
				P99   float64 `json:"p99"`
				Valid bool    `json:"valid"`
				Lat   struct {
					P99 float64 `json:"p99"`
				} `json:"latency_ms"`
			} `json:"steps"`
		}
		if json.Unmarshal(out.Bytes(), &rep) == nil && len(rep.Steps) > 0 {
			r.p99 = fmt.Sprintf("%.2f", rep.Steps[0].Lat.P99)
			if !rep.Steps[0].Valid {
				r.note = "step invalid"
			}
		}
	}
	return r, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// ---- set-up ----

func build(tmp string) (map[string]string, []string, error) {
	bin := map[string]string{}
	var notes []string
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, nil, err
	}
	bin["gosleuth"] = filepath.Join(tmp, "gosleuth")
	c := exec.Command("go", "build", "-o", bin["gosleuth"], "./cmd/gosleuth")
	c.Dir, c.Stdout, c.Stderr = root, os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return nil, nil, fmt.Errorf("build gosleuth: %w", err)
	}
	// vegeta is not packaged in Debian; build a pinned version from the Go
	// module proxy in a throwaway module (never in gosleuth's go.mod).
	vdir := filepath.Join(tmp, "vegeta-build")
	os.MkdirAll(vdir, 0o755)
	os.WriteFile(filepath.Join(vdir, "go.mod"), []byte("module vegetabuild\n\ngo 1.26.0\n\nrequire github.com/tsenart/vegeta/v12 v12.12.0\n"), 0o644)
	os.WriteFile(filepath.Join(vdir, "tools.go"), []byte("//go:build tools\n\npackage vegetabuild\n\nimport _ \"github.com/tsenart/vegeta/v12\"\n"), 0o644)
	c = exec.Command("go", "build", "-o", filepath.Join(tmp, "vegeta"), "github.com/tsenart/vegeta/v12")
	c.Dir, c.Stdout, c.Stderr = vdir, os.Stderr, os.Stderr
	c.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if err := c.Run(); err != nil {
		notes = append(notes, fmt.Sprintf("vegeta not built (%v): skipped", err))
	} else {
		bin["vegeta"] = filepath.Join(tmp, "vegeta")
	}
	for _, t := range []string{"wrk", "hey"} {
		p, err := exec.LookPath(t)
		if err != nil && os.Getuid() == 0 {
			exec.Command("apt-get", "install", "-y", "-qq", t).Run()
			p, err = exec.LookPath(t)
		}
		if err != nil {
			notes = append(notes, t+" not installed (apt-get install "+t+"): skipped")
			continue
		}
		bin[t] = p
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	bin["self"] = self
	return bin, notes, nil
}

// writeTargets writes vegeta's target file.
func writeTargets(bin map[string]string, tmp, url string) error {
	bin["targets"] = filepath.Join(tmp, "targets.txt")
	return os.WriteFile(bin["targets"], []byte("GET "+url+"/\n"), 0o644)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func run(d time.Duration, rounds, conns int, ratesS, toolsS string, genCPU, srvCPU int) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("needs 2 CPUs, have %d", runtime.NumCPU())
	}
	var rates []float64
	for _, s := range strings.Split(ratesS, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("bad rate %q", s)
		}
		rates = append(rates, v)
	}
	tmp, err := os.MkdirTemp("", "load-vs-peers")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, notes, err := build(tmp)
	if err != nil {
		return err
	}
	var tools []string
	for _, t := range strings.Split(toolsS, ",") {
		if bin[t] != "" {
			tools = append(tools, t)
		}
	}
	addr, err := freePort()
	if err != nil {
		return err
	}
	saddr, err := freePort()
	if err != nil {
		return err
	}
	srv := exec.Command("taskset", "-c", strconv.Itoa(srvCPU), bin["self"], "-serve", addr, "-stats", saddr)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer srv.Process.Kill()
	base, statsBase := "http://"+addr, "http://"+saddr
	if err := writeTargets(bin, tmp, base); err != nil {
		return err
	}
	for i := 0; ; i++ {
		if _, err := getStats(statsBase, false); err == nil {
			break
		}
		if i > 100 {
			return fmt.Errorf("server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("load-vs-peers: %s per run, %d rounds, %d connections; server (Go net/http hello, GOMAXPROCS=1) on CPU %d, generators on CPU %d\n",
		d, rounds, conns, srvCPU, genCPU)
	fmt.Printf("started %s; tools: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.Join(tools, ", "))
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	type key struct{ scenario, tool string }
	res := map[key][]result{}
	scenarios := []float64{0}
	scenarios = append(scenarios, rates...)
	for round := 1; round <= rounds; round++ {
		for _, rate := range scenarios {
			sc := "closed"
			if rate > 0 {
				sc = fmt.Sprintf("fixed %.0f/s", rate)
			}
			for _, t := range tools {
				if t == "wrk" && rate > 0 {
					continue // wrk has no fixed rate
				}
				time.Sleep(2 * time.Second) // let TIME_WAIT and the CPUs settle
				r, err := runTool(bin, t, sc, base, statsBase, rate, d, conns, genCPU, srv.Process.Pid)
				if err != nil {
					fmt.Fprintf(os.Stderr, "round %d %s %s: %v\n", round, sc, t, err)
					continue
				}
				fmt.Fprintf(os.Stderr, "round %d %-14s %-8s %8.0f req/s  cpu %5.2fs  %6.0f req/cpu-s  rss %5.1fMB  conns %d/%d  bg %.1f %s\n",
					round, sc, t, r.reqPerSec, r.cpu, float64(r.served)/r.cpu, r.rssMB, r.peak, r.opened, r.bg, r.note)
				res[key{sc, t}] = append(res[key{sc, t}], r)
			}
		}
	}
	med := func(v []float64) (m, lo, hi float64) {
		s := slices.Clone(v)
		sort.Float64s(s)
		return s[len(s)/2], s[0], s[len(s)-1]
	}
	pick := func(rs []result, f func(result) float64) []float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return v
	}
	w := io.Writer(os.Stdout)
	eff := map[string]float64{}
	rps := map[string]float64{}
	for _, rate := range scenarios {
		sc := "closed"
		if rate > 0 {
			sc = fmt.Sprintf("fixed %.0f/s", rate)
		}
		fmt.Fprintf(w, "\n== %s (median of %d rounds, min-max)\n", sc, rounds)
		fmt.Fprintf(w, "%-9s %-26s %-24s %-18s %-14s %-16s %-10s %s\n", "tool", "req/s", "req per gen CPU-s",
			"% of target", "max RSS MB", "conns peak/opened", "bg CPU-s", "gosleuth p99 ms")
		for _, t := range tools {
			rs := res[key{sc, t}]
			if len(rs) == 0 {
				continue
			}
			r1, r0, r2 := med(pick(rs, func(r result) float64 { return r.reqPerSec }))
			e1, e0, e2 := med(pick(rs, func(r result) float64 { return float64(r.served) / r.cpu }))
			m1, _, m2 := med(pick(rs, func(r result) float64 { return r.rssMB }))
			p1, _, p2 := med(pick(rs, func(r result) float64 { return float64(r.peak) }))
			o1, _, o2 := med(pick(rs, func(r result) float64 { return float64(r.opened) }))
			b1, _, _ := med(pick(rs, func(r result) float64 { return r.bg }))
			pct := "-"
			if rate > 0 {
				a1, a0, a2 := med(pick(rs, func(r result) float64 { return 100 * r.reqPerSec / rate }))
				pct = fmt.Sprintf("%.2f (%.2f-%.2f)", a1, a0, a2)
			}
			var p99s []string
			for _, r := range rs {
				if r.p99 != "" {
					p99s = append(p99s, r.p99)
				}
				if r.note != "" {
					p99s = append(p99s, "["+r.note+"]")
				}
			}
			fmt.Fprintf(w, "%-9s %-26s %-24s %-18s %-14s %-16s %-10.1f %s\n", t,
				fmt.Sprintf("%.0f (%.0f-%.0f)", r1, r0, r2), fmt.Sprintf("%.0f (%.0f-%.0f)", e1, e0, e2), pct,
				fmt.Sprintf("%.1f-%.1f", m1, m2), fmt.Sprintf("%.0f-%.0f / %.0f-%.0f", p1, p2, o1, o2), b1,
				strings.Join(p99s, " "))
			if rate == 0 {
				eff[t], rps[t] = e1, r1
			}
		}
	}
	fmt.Fprintf(w, "\n== ratios (closed loop, medians)\n")
	for _, t := range tools {
		if t == "gosleuth" || eff[t] == 0 || eff["gosleuth"] == 0 {
			continue
		}
		fmt.Fprintf(w, "gosleuth / %-7s requests per generator CPU-second: %.2fx   req/s: %.2fx\n", t,
			eff["gosleuth"]/eff[t], rps["gosleuth"]/rps[t])
	}
	fmt.Fprintf(w, "gosleuth requests per generator CPU-second: %.0f (goal >= 35000)\n", eff["gosleuth"])
	return nil
}
