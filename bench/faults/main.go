// Command faults is gosleuth's fault campaign: it runs the built gosleuth
// against targets that misbehave (exit mid-window, are zombies or kernel
// threads, churn thousands of processes a second, have 2,000 threads),
// under hostile limits (RLIMIT_NOFILE 64, perf_event_paranoid 3, a non-root
// user), kills it with SIGKILL mid-run, and points it at hostile peers
// (a pprof endpoint that is slow, huge, a gzip bomb or a redirect loop; a
// load target that never answers, sends an endless body or resets). Each
// row asserts no panic, a bounded time, a complete report or a clear
// one-line error, and nothing left behind, and prints its measurements.
//
// Run as root from the repository root: go run ./bench/faults
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	gosleuth string
	failed   int
)

func main() {
	churnFor := flag.Duration("churn", 30*time.Second, "how long the 5,000 processes/s churn runs")
	only := flag.String("only", "", "run only the groups named, comma-separated: exits,identities,limits,sigkill,threads,churn,peers,load")
	flag.Parse()
	run := func(name string, f func()) {
		if *only == "" || slices.Contains(strings.Split(*only, ","), name) {
			f()
		}
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "faults: run as root (rows switch users, limits and perf_event_paranoid)")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "gosleuth-faults-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	gosleuth = filepath.Join(dir, "gosleuth")
	if out, err := exec.Command("go", "build", "-o", gosleuth, "./cmd/gosleuth").CombinedOutput(); err != nil {
		fatal(fmt.Errorf("build: %v\n%s", err, out))
	}
	fmt.Printf("%-58s %-6s %s\n", "row", "result", "measured")
	run("exits", exitsMidWindow)
	run("identities", identities)
	run("limits", func() { limits(dir) })
	run("sigkill", sigkill)
	run("threads", threads2000)
	run("churn", func() { churn(*churnFor) })
	run("peers", hostilePeers)
	run("load", hostileLoadTargets)
	if failed > 0 {
		fmt.Printf("\n%d row(s) failed\n", failed)
		os.Exit(1)
	}
	fmt.Println("\nall rows passed")
}

func fatal(err error) { fmt.Fprintln(os.Stderr, "faults:", err); os.Exit(2) }

// result is one gosleuth run.
type result struct {
	code           int
	stdout, stderr string
	wall           time.Duration
	maxRSS         int64 // KiB
	cpu            time.Duration
}

func runG(env []string, cred *syscall.Credential, timeout time.Duration, args ...string) result {
	return runProg(gosleuth, env, cred, timeout, args...)
}

// runProg runs prog with args and reports its outcome and resource use.
func runProg(prog string, env []string, cred *syscall.Credential, timeout time.Duration, args ...string) result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = append(os.Environ(), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	t0 := time.Now()
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: e.String(), wall: time.Since(t0)}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = ru.Maxrss
			r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if ctx.Err() != nil {
		r.code = -1
	} else if err != nil && r.code == 0 {
		r.code = -2
	}
	return r
}

// sane reports why r is not a clean outcome: a panic, a hang, or an error
// that is not one line.
func sane(r result, bound time.Duration) string {
	switch {
	case r.code == -1:
		return fmt.Sprintf("hung past %s", bound)
	case strings.Contains(r.stderr, "panic:") || goroutineTrace.MatchString(r.stderr):
		return "panicked: " + firstLine(r.stderr)
	case r.code != 0 && strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 && !strings.Contains(r.stderr, "run 'gosleuth help"):
		return "error is not one line: " + r.stderr
	case r.code == 0 && r.stdout == "":
		return "exit 0 with no report"
	}
	return ""
}

// goroutineTrace matches the first line of a Go stack dump.
var goroutineTrace = regexp.MustCompile(`(?m)^goroutine \d+ \[`)

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func row(name string, problem string, measured string) {
	res := "ok"
	if problem != "" {
		res = "FAIL"
		failed++
		measured = problem + "; " + measured
	}
	fmt.Printf("%-58s %-6s %s\n", name, res, measured)
}

func start(name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		fatal(err)
	}
	return c
}

func stop(c *exec.Cmd) { c.Process.Kill(); c.Wait() }

var commands = [][]string{
	{"top", "--once", "--interval", "500ms"},
	{"syscalls", "--duration", "3s"},
	{"profile", "--duration", "3s", "-o", "/tmp/gosleuth-faults.pb.gz"},
	{"inspect", "--duration", "3s"},
	{"doctor", "--duration", "3s"},
}

func withPID(args []string, pid int) []string {
	return append([]string{args[0], "--pid", strconv.Itoa(pid)}, args[1:]...)
}

func exitsMidWindow() {
	for _, c := range commands {
		t := start("sleep", "1")
		go t.Wait()
		r := runG(nil, nil, 30*time.Second, withPID(c, t.Process.Pid)...)
		row(c[0]+": target exits mid-window", sane(r, 30*time.Second), fmt.Sprintf("exit %d in %.1fs: %s", r.code, r.wall.Seconds(), firstLine(r.stderr)))
	}
	os.Remove("/tmp/gosleuth-faults.pb.gz")
}

func identities() {
	z := start("true")
	time.Sleep(200 * time.Millisecond)
	for _, c := range commands {
		for _, tgt := range []struct {
			what string
			pid  int
			want string
		}{{"zombie", z.Process.Pid, "zombie"}, {"kernel thread", 2, "kernel thread"}} {
			r := runG(nil, nil, 30*time.Second, withPID(c, tgt.pid)...)
			p := sane(r, 30*time.Second)
			if p == "" && (r.code != 1 || !strings.Contains(r.stderr, tgt.want)) {
				p = "no clear line"
			}
			row(c[0]+": target is a "+tgt.what, p, fmt.Sprintf("exit %d: %s", r.code, strings.TrimSpace(r.stderr)))
		}
	}
	z.Wait()
	// gosleuth watching itself: the shell's PID becomes gosleuth's at exec.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", "exec "+gosleuth+" doctor --pid $$ --duration 2s").CombinedOutput()
	p := ""
	if err != nil || strings.Contains(string(out), "panic:") {
		p = fmt.Sprintf("%v", err)
	}
	row("doctor: target is gosleuth itself", p, firstLine(string(out)))
}

func limits(dir string) {
	t := start("sleep", "60")
	defer stop(t)
	pid := strconv.Itoa(t.Process.Pid)
	for _, args := range [][]string{{"syscalls", "--pid", pid, "--duration", "1s"}, {"doctor", "--pid", pid, "--duration", "2s"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "prlimit", append([]string{"--nofile=64:64", gosleuth}, args...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		p := ""
		if err != nil || strings.Contains(string(out), "panic:") {
			p = fmt.Sprintf("exit: %v", err)
		}
		row(args[0]+": RLIMIT_NOFILE 64", p, firstLine(string(out)))
	}
	old, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err := os.WriteFile("/proc/sys/kernel/perf_event_paranoid", []byte("3"), 0); err == nil {
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		for _, args := range [][]string{{"syscalls", "--pid", pid, "--duration", "1s"}, {"profile", "--duration", "1s", "--", "sleep", "2"}, {"doctor", "--duration", "2s"}} {
			r := runG(nil, nobody, 60*time.Second, args...)
			row(args[0]+": perf_event_paranoid 3, user nobody", sane(r, 60*time.Second), fmt.Sprintf("exit %d: %s", r.code, firstLine(r.stderr+r.stdout)))
		}
		os.WriteFile("/proc/sys/kernel/perf_event_paranoid", old, 0)
	} else {
		row("perf_event_paranoid 3", "cannot set it: "+err.Error(), "")
	}
}

// perfFDs counts perf event descriptors held by any process.
func perfFDs() int {
	n := 0
	pids, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, p := range pids {
		if l, err := os.Readlink(p); err == nil && l == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

func sigkill() {
	t := start("sh", "-c", "while :; do :; done")
	defer stop(t)
	pid := strconv.Itoa(t.Process.Pid)
	base := perfFDs()
	for _, args := range [][]string{
		{"syscalls", "--pid", pid, "--duration", "30s"},
		{"profile", "--pid", pid, "--duration", "30s", "-o", "/tmp/gosleuth-faults-kill.pb.gz"},
		{"doctor", "--pid", pid, "--duration", "30s", "-o", "/tmp/gosleuth-faults-kill.json"},
	} {
		cmd := exec.Command(gosleuth, args...)
		cmd.Start()
		time.Sleep(3 * time.Second)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		t0 := time.Now()
		var left int
		for {
			left = perfFDs() - base
			if left <= 0 || time.Since(t0) > 10*time.Second {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		tmp, _ := filepath.Glob("/tmp/.gosleuth-faults-kill*")
		p := ""
		if left > 0 {
			p = fmt.Sprintf("%d perf descriptors left", left)
		}
		if len(tmp) > 0 {
			p += fmt.Sprintf(" temporary files left: %v", tmp)
		}
		row(args[0]+": SIGKILL mid-window", p, fmt.Sprintf("no perf event left %.2fs after the kill, no temporary file", time.Since(t0).Seconds()))
	}
}

func threads2000() {
	src := `package main
import ("os";"runtime";"syscall";"time")
func main(){ for i:=0;i<2000;i++{ go func(){ runtime.LockOSThread(); for { syscall.Syscall(syscall.SYS_GETPPID,0,0,0); time.Sleep(100*time.Millisecond) } }() }; os.Stdout.WriteString("ready\n"); select{} }`
	dir, _ := os.MkdirTemp("", "faults-threads")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module t\ngo 1.26\n"), 0o644)
	bin := filepath.Join(dir, "t")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		row("2,000-thread target", "build: "+string(out), "")
		return
	}
	t := start(bin)
	defer stop(t)
	time.Sleep(3 * time.Second)
	for _, args := range [][]string{{"doctor", "--pid", strconv.Itoa(t.Process.Pid), "--duration", "3s", "--format", "json"}, {"syscalls", "--pid", strconv.Itoa(t.Process.Pid), "--duration", "2s"}} {
		r := runG(nil, nil, 120*time.Second, args...)
		p := sane(r, 120*time.Second)
		if p == "" && args[0] == "doctor" && !strings.Contains(r.stdout, `"syscalls"`) {
			p = "no syscall counts"
		}
		row(args[0]+": a target with 2,000 threads", p, fmt.Sprintf("exit %d in %.1fs, max RSS %d MB", r.code, r.wall.Seconds(), r.maxRSS/1024))
	}
}

func churn(d time.Duration) {
	quiet := map[string]result{}
	measure := func(args ...string) result { return runG(nil, nil, d+60*time.Second, args...) }
	secs := strconv.Itoa(int(d.Seconds()))
	top := []string{"top", "--format", "json", "--interval", "1s", "--count", secs}
	doc := []string{"doctor", "--duration", d.String(), "--max-looks", "2"}
	// The doctor's reading alone: the churn's shells are guilty of
	// exec-hot-path, and the close looks it then spends on two of them
	// (kernel stacks, syscall counts) are work a quiet host never asks for.
	read := []string{"doctor", "--duration", d.String(), "--max-looks", "0"}
	// procps top in batch mode is the anchor: the same whole-host table at
	// the same interval, measured in the same run.
	anchor := func() result {
		return runProg("top", nil, nil, d+60*time.Second, "-b", "-d", "1", "-n", secs)
	}
	quiet["top"], quiet["doctor"], quiet["doctor --max-looks 0"], quiet["procps"] = measure(top...), measure(doc...), measure(read...), anchor()
	quiet["exporter"] = runExporter(d)
	// 5,000 short-lived processes a second: 50 shells each forking 100/s.
	var shells []*exec.Cmd
	for range 50 {
		c := exec.Command("sh", "-c", "while :; do /bin/true & /bin/true & wait; sleep 0.02; done")
		if c.Start() == nil {
			shells = append(shells, c)
		}
	}
	time.Sleep(time.Second)
	busy := map[string]result{"top": measure(top...), "doctor": measure(doc...), "doctor --max-looks 0": measure(read...), "procps": anchor(), "exporter": runExporter(d)}
	// Killed and waited for here: a context's kill races with the exit.
	for _, c := range shells {
		c.Process.Kill()
		c.Wait()
	}
	anchorRatio := float64(busy["procps"].cpu) / float64(max(quiet["procps"].cpu, time.Millisecond))
	for _, k := range []string{"top", "doctor", "doctor --max-looks 0", "exporter"} {
		q, b := quiet[k], busy[k]
		p := sane(b, d+60*time.Second)
		if p == "" && k == "exporter" && b.code != 0 {
			p = b.stderr
		}
		ratio := float64(b.cpu) / float64(max(q.cpu, time.Millisecond))
		if p == "" && b.maxRSS > 200*1024 {
			p = fmt.Sprintf("max RSS %d MB", b.maxRSS/1024)
		}
		scrapes := ""
		if k == "exporter" {
			scrapes = fmt.Sprintf("; %s (quiet: %s)", b.stdout, q.stdout)
		}
		row(k+": short-lived processes churning for "+d.String(), p, fmt.Sprintf("CPU %.2fs against %.2fs quiet (%.1fx; procps top -b %.2fs against %.2fs, %.1fx; the churn's own processes are in the whole-host view), max RSS %d MB (quiet %d MB)%s",
			b.cpu.Seconds(), q.cpu.Seconds(), ratio, busy["procps"].cpu.Seconds(), quiet["procps"].cpu.Seconds(), anchorRatio, b.maxRSS/1024, q.maxRSS/1024, scrapes))
	}
}

// runExporter runs gosleuth exporter (without its periodic doctor) for d,
// scraped once a second, and reports its outcome: a failed scrape or an
// exit before the end is its stderr.
func runExporter(d time.Duration) result {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(gosleuth, "exporter", "--listen", addr, "--doctor-every", "0")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return result{code: -2, stderr: err.Error()}
	}
	good := func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200 && bytes.Contains(b, []byte("gosleuth_group_wakeups_total")), nil
	}
	// Scrapes are counted from the first good one: before it the
	// exporter is starting (as root it loads the kernel's BTF for the
	// task iterator, which a saturated host can stretch to seconds), and
	// the row says how long that took.
	for time.Since(t0) < 15*time.Second {
		if ok, _ := good(); ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	startup := time.Since(t0)
	scrapes, failures := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		ok, err := good()
		if err != nil {
			failures++
		}
		if ok {
			scrapes++
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	r := result{stdout: o.String(), stderr: e.String(), wall: time.Since(t0)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	r.stdout = fmt.Sprintf("%d scrapes, the first good one after %s", scrapes, startup.Round(10*time.Millisecond))
	if scrapes < int(d.Seconds())-3 {
		r.code, r.stderr = 1, fmt.Sprintf("only %d good scrapes of %d (%d failed) after the first at %s", scrapes, int(d.Seconds()), failures, startup.Round(10*time.Millisecond))
	}
	return r
}

func serve(h http.HandlerFunc) (string, func()) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }
}

func hostilePeers() {
	t := start("sleep", "120")
	defer stop(t)
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write(make([]byte, 1<<30)) // 1 GiB of zeros, ~1 MB compressed
	zw.Close()
	peers := []struct {
		name string
		h    http.HandlerFunc
	}{
		{"slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Minute) }},
		{"huge", func(w http.ResponseWriter, r *http.Request) {
			b := bytes.Repeat([]byte("go_goroutines 1\n"), 1<<16)
			for i := 0; i < 1024 && r.Context().Err() == nil; i++ {
				w.Write(b)
			}
		}},
		{"gzip bomb", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(bomb.Bytes())
		}},
		{"redirect loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, r.URL.Path+"x", http.StatusFound) }},
	}
	for _, peer := range peers {
		u, done := serve(peer.h)
		for _, flagName := range []string{"--pprof-url", "--metrics-url"} {
			r := runG(nil, nil, 90*time.Second, "inspect", "--pid", strconv.Itoa(t.Process.Pid), "--duration", "1s", flagName, u+"/debug/pprof/")
			p := sane(r, 90*time.Second)
			if p == "" && r.maxRSS > 400*1024 {
				p = fmt.Sprintf("max RSS %d MB", r.maxRSS/1024)
			}
			row("inspect "+flagName+": a "+peer.name+" endpoint", p, fmt.Sprintf("exit %d in %.1fs, max RSS %d MB: %s", r.code, r.wall.Seconds(), r.maxRSS/1024, firstLine(r.stderr)))
		}
		done()
	}
}

func hostileLoadTargets() {
	targets := []struct {
		name, kind string
		h          http.HandlerFunc
	}{
		{"never answers", "timeout", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"endless body", "timeout", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000000000")
			for r.Context().Err() == nil {
				if _, err := w.Write(make([]byte, 1<<16)); err != nil {
					return
				}
			}
		}},
		{"resets", "reset", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}},
	}
	for _, tt := range targets {
		u, done := serve(tt.h)
		r := runG(nil, nil, 60*time.Second, "load", u+"/", "--rate", "50", "--duration", "3s", "--timeout", "2s", "--watch", "-1", "--format", "json", "--quiet")
		p := sane(r, 60*time.Second)
		switch {
		case p != "":
		case !strings.Contains(r.stdout, `"`+tt.kind+`"`) || strings.Contains(r.stdout, "generator fell behind"):
			p = "not counted as " + tt.kind
		case tt.kind == "timeout" && !strings.Contains(r.stdout, `"valid": false`):
			// Unanswered requests must not leave a valid step (with p99 0).
			p = "unanswered requests left the step valid"
		}
		row("load: a target that "+tt.name, p, fmt.Sprintf("exit %d in %.1fs, max RSS %d MB", r.code, r.wall.Seconds(), r.maxRSS/1024))
		done()
	}
}
