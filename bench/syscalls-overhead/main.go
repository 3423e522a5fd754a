// Command syscalls-overhead measures what counting syscalls costs the
// counted process and everyone else: a getpid loop and a pread loop, each
// measured alone, under "gosleuth syscalls", under "perf stat -e
// 'syscalls:sys_enter_*'" and under "strace -c -f", in one run, rounds
// interleaved, medians printed as ratios against the loop alone. It also
// measures a bystander loop's cost while gosleuth counts another process,
// the attach time to a 10-thread process against perf stat's, and compares
// gosleuth's counts with perf stat's on the same workload.
//
// The figure of merit is the target's CPU time per syscall (getrusage of
// the looping thread), which stays steady on a shared, noisy machine;
// throughput (calls per wall second) is printed too.
//
// Run it through run.sh (which builds gosleuth) as root.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	worker := flag.String("worker", "", "internal: run a loop (getpid, pread, idle)")
	threads := flag.Int("threads", 1, "internal: idle threads for -worker idle")
	progress := flag.String("progress", "", "internal: progress file of -worker")
	gosleuth := flag.String("gosleuth", "gosleuth", "gosleuth `binary`")
	rounds := flag.Int("rounds", 3, "rounds of every measurement")
	only := flag.String("only", "", "run only these parts (comma list of overhead, bystander, attach, counts)")
	window := flag.Duration("window", 2*time.Second, "measuring window")
	flag.Parse()
	if *worker != "" {
		runWorker(*worker, *threads, *progress)
		return
	}
	log.SetFlags(0)
	b := &bench{gosleuth: *gosleuth, window: *window, dir: must(os.MkdirTemp("", "syscalls-overhead"))}
	defer os.RemoveAll(b.dir)
	part := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }
	if part("overhead") {
		b.overhead(*rounds)
	}
	if part("bystander") {
		b.bystander(*rounds)
	}
	if part("attach") {
		b.attach(*rounds)
	}
	if part("counts") {
		b.counts()
	}
}

// runWorker loops on one locked thread and writes "calls cpu-ns" of that
// thread to the progress file every 100 ms.
func runWorker(kind string, idle int, progress string) {
	if kind == "idle" {
		for range idle {
			go func() {
				runtime.LockOSThread()
				for {
					time.Sleep(time.Hour)
				}
			}()
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	runtime.LockOSThread()
	f, err := os.CreateTemp("", "pread")
	if err != nil {
		log.Fatal(err)
	}
	f.WriteString("sixteen bytes...")
	fd := int(f.Fd())
	buf := make([]byte, 16)
	last := time.Now()
	for n := uint64(1); ; n++ {
		if kind == "getpid" {
			syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		} else {
			syscall.Pread(fd, buf, 0)
		}
		if n%1024 == 0 && time.Since(last) > 100*time.Millisecond {
			last = time.Now()
			var ru syscall.Rusage
			syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
			tmp := progress + ".tmp"
			os.WriteFile(tmp, fmt.Appendf(nil, "%d %d %d\n", n, ru.Utime.Nano()+ru.Stime.Nano(), time.Now().UnixNano()), 0o644)
			os.Rename(tmp, progress)
		}
	}
}

type bench struct {
	gosleuth string
	window   time.Duration
	dir      string
	seq      int
}

// proc is a started worker.
type proc struct {
	cmd      *exec.Cmd
	progress string
}

func (b *bench) start(kind string, threads int) *proc {
	b.seq++
	p := &proc{progress: filepath.Join(b.dir, fmt.Sprintf("progress%d", b.seq))}
	p.cmd = exec.Command(os.Args[0], "-worker", kind, "-threads", strconv.Itoa(threads), "-progress", p.progress)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	if kind != "idle" {
		p.read()
	}
	return p
}

func (p *proc) stop() { p.cmd.Process.Kill(); p.cmd.Wait() }

// read returns the worker's calls, CPU ns and wall ns.
func (p *proc) read() (calls, cpu, wall float64) {
	for range 500 {
		if b, err := os.ReadFile(p.progress); err == nil {
			if _, err := fmt.Sscan(string(b), &calls, &cpu, &wall); err == nil {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Fatalf("worker %d makes no progress", p.cmd.Process.Pid)
	return
}

// measure returns CPU ns per call and calls per second over the window.
func (p *proc) measure(window time.Duration) (nsPerCall, perSec float64) {
	c0, u0, w0 := p.read()
	time.Sleep(window)
	c1, u1, w1 := p.read()
	if c1 <= c0 {
		log.Fatalf("worker %d made no calls in the window", p.cmd.Process.Pid)
	}
	return (u1 - u0) / (c1 - c0), (c1 - c0) / (w1 - w0) * 1e9
}

// tool is a way of counting a process.
type tool struct {
	name string
	args func(b *bench, pid int) []string // nil: nothing attached
	fds  bool                             // attached once it holds perf fds
}

var tools = []tool{
	{name: "alone"},
	{name: "gosleuth", args: func(b *bench, pid int) []string {
		return []string{b.gosleuth, "syscalls", "--pid", strconv.Itoa(pid), "--duration", "10m"}
	}, fds: true},
	{name: "gosleuth --errors", args: func(b *bench, pid int) []string {
		return []string{b.gosleuth, "syscalls", "--pid", strconv.Itoa(pid), "--duration", "10m", "--errors"}
	}, fds: true},
	{name: "gosleuth --latency", args: func(b *bench, pid int) []string {
		return []string{b.gosleuth, "syscalls", "--pid", strconv.Itoa(pid), "--duration", "10m", "--latency"}
	}, fds: true},
	{name: "perf stat", args: func(_ *bench, pid int) []string {
		return []string{"perf", "stat", "-e", "syscalls:sys_enter_*", "-p", strconv.Itoa(pid)}
	}, fds: true},
	{name: "strace -c -f", args: func(_ *bench, pid int) []string {
		return []string{"strace", "-c", "-f", "-p", strconv.Itoa(pid)}
	}},
}

// attachTool starts t on pid and waits until it counts; it returns the
// running tool (nil for "alone") and how long attaching took.
func attachTool(b *bench, t tool, pid, wantFDs int) (*exec.Cmd, time.Duration) {
	if t.args == nil {
		return nil, 0
	}
	a := t.args(b, pid)
	cmd := exec.Command(a[0], a[1:]...)
	var said *bufio.Reader
	if strings.HasPrefix(t.name, "gosleuth") {
		pipe, err := cmd.StderrPipe()
		if err != nil {
			log.Fatal(err)
		}
		said = bufio.NewReader(pipe)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		log.Fatalf("start %s: %v", t.name, err)
	}
	if !t.fds {
		time.Sleep(time.Second) // strace attaches at once
		return cmd, 0
	}
	if said != nil && strings.HasPrefix(t.name, "gosleuth") {
		// gosleuth says when it counts (all events enabled).
		for {
			line, err := said.ReadString('\n')
			if err != nil {
				log.Fatalf("gosleuth ended before counting")
			}
			if strings.Contains(line, "counting syscalls") {
				took := time.Since(start)
				go io.Copy(io.Discard, said)
				time.Sleep(200 * time.Millisecond)
				return cmd, took
			}
		}
	}
	for fdCount(cmd.Process.Pid) < wantFDs {
		if time.Since(start) > 2*time.Minute {
			log.Fatalf("%s did not attach in 2 minutes", t.name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	time.Sleep(200 * time.Millisecond) // let it settle (enable)
	return cmd, took
}

// detach stops a tool and waits until it has released everything.
func detach(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
}

// foreignPerf lists the processes other than this bench's tools that hold
// perf event descriptors (other tracers skew the bystander baseline).
func foreignPerf() string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := "/proc/" + e.Name() + "/fd"
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join(dir, fd.Name())); l == "anon_inode:[perf_event]" {
				comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
				out = append(out, fmt.Sprintf("%d(%s)", pid, strings.TrimSpace(string(comm))))
				break
			}
		}
	}
	return strings.Join(out, " ")
}

// fdCount returns how many descriptors pid has open (perf stat opens
// little else).
func fdCount(pid int) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	return len(names)
}

func syscallTracepoints() int {
	ents, err := os.ReadDir("/sys/kernel/tracing/events/syscalls")
	if err != nil {
		log.Fatalf("list syscall tracepoints: %v", err)
	}
	var n int
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sys_enter_") {
			n++
		}
	}
	return n
}

func threadsOf(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return len(ents)
}

func (b *bench) overhead(rounds int) {
	ntp := syscallTracepoints()
	for _, kind := range []string{"getpid", "pread"} {
		cpu := map[string][]float64{}
		rate := map[string][]float64{}
		for r := range rounds {
			for _, t := range tools {
				p := b.start(kind, 1)
				cmd, _ := attachTool(b, t, p.cmd.Process.Pid, ntp*threadsOf(p.cmd.Process.Pid))
				ns, ps := p.measure(b.window)
				detach(cmd)
				p.stop()
				cpu[t.name] = append(cpu[t.name], ns)
				rate[t.name] = append(rate[t.name], ps)
				log.Printf("# %s round %d %-13s %8.0f ns/call CPU %10.0f calls/s", kind, r+1, t.name, ns, ps)
			}
		}
		fmt.Printf("\n%s loop, %d rounds of %s, medians (ratio vs alone):\n", kind, rounds, b.window)
		fmt.Printf("  %-20s %12s %8s %14s %8s\n", "", "CPU ns/call", "ratio", "calls/s", "ratio")
		base, baseRate := median(cpu["alone"]), median(rate["alone"])
		for _, t := range tools {
			c, r := median(cpu[t.name]), median(rate[t.name])
			fmt.Printf("  %-20s %12.0f %7.2fx %14.0f %7.2fx\n", t.name, c, c/base, r, baseRate/r)
		}
		g, ps := median(cpu["gosleuth"]), median(cpu["perf stat"])
		fmt.Printf("  gosleuth/perf stat: %.2fx CPU per call (added ns per call: gosleuth %.0f, perf stat %.0f)\n",
			g/ps, g-base, ps-base)
	}
}

// bystanderTools adds gosleuth counting one syscall nobody makes (acct):
// what is left of the bystander's cost then is the kernel's syscall
// tracepoint slow path, which every task takes while any syscall
// tracepoint is in use.
var bystanderTools = append([]tool{tools[0], tools[1], tools[4]}, tool{name: "gosleuth --only acct", args: func(b *bench, pid int) []string {
	return []string{b.gosleuth, "syscalls", "--pid", strconv.Itoa(pid), "--duration", "10m", "--only", "acct"}
}, fds: true})

// bystander measures a getpid loop while gosleuth (and, as the anchor,
// perf stat) counts another process.
func (b *bench) bystander(rounds int) {
	ntp := syscallTracepoints()
	cpu := map[string][]float64{}
	rate := map[string][]float64{}
	foreign := 0
	for r := range rounds {
		target := b.start("getpid", 1)
		by := b.start("getpid", 1)
		for _, t := range bystanderTools {
			cmd, _ := attachTool(b, t, target.cmd.Process.Pid, ntp*threadsOf(target.cmd.Process.Pid))
			if t.args == nil {
				if f := foreignPerf(); f != "" {
					log.Printf("# bystander round %d: other processes hold perf events while measuring alone: %s", r+1, f)
					foreign++
				}
			}
			ns, ps := by.measure(b.window)
			detach(cmd)
			cpu[t.name] = append(cpu[t.name], ns)
			rate[t.name] = append(rate[t.name], ps)
			log.Printf("# bystander round %d: %.0f ns/call, %s on another process", r+1, ns, t.name)
		}
		target.stop()
		by.stop()
	}
	fmt.Printf("\nbystander getpid loop while another getpid loop is counted, %d rounds, medians (ratio vs alone):\n", rounds)
	if foreign > 0 {
		fmt.Printf("  (in %d of %d rounds other processes held perf events during the alone window: if any was a\n"+
			"  syscall tracepoint, every task was already on the slow path and the ratios understate the tax)\n", foreign, rounds)
	}
	base, baseRate := median(cpu["alone"]), median(rate["alone"])
	for _, t := range bystanderTools {
		c, r := median(cpu[t.name]), median(rate[t.name])
		fmt.Printf("  %-20s %8.0f ns/call CPU %7.2fx %12.0f calls/s %7.2fx slowdown\n", t.name, c, c/base, r, baseRate/r)
	}
}

var attachTools = []tool{tools[1], tools[4]}

// attach times attaching to a process with 10 idle threads (plus the Go
// runtime's), and the whole run with a 1 s window including release.
func (b *bench) attach(rounds int) {
	ntp := syscallTracepoints()
	var att, total = map[string][]float64{}, map[string][]float64{}
	var nthreads int
	for range rounds {
		p := b.start("idle", 10)
		for threadsOf(p.cmd.Process.Pid) < 11 {
			time.Sleep(10 * time.Millisecond)
		}
		nthreads = threadsOf(p.cmd.Process.Pid)
		for _, t := range attachTools {
			start := time.Now()
			cmd, took := attachTool(b, t, p.cmd.Process.Pid, ntp*nthreads)
			detach(cmd)
			att[t.name] = append(att[t.name], took.Seconds())
			total[t.name] = append(total[t.name], time.Since(start).Seconds())
		}
		p.stop()
	}
	fmt.Printf("\nattach to a process with %d threads (%d tracepoints each), %d rounds, medians:\n", nthreads, ntp, rounds)
	for _, t := range attachTools {
		fmt.Printf("  %-10s attach %.2fs; start to exit incl. release %.1fs\n", t.name, median(att[t.name]), median(total[t.name]))
	}
	fmt.Printf("  attach ratio gosleuth/perf stat: %.2fx\n", median(att["gosleuth"])/median(att["perf stat"]))
}

// counts runs the same deterministic workload (testdata patient: 4
// threads x 50000 getppid plus a child process) under gosleuth and perf
// stat and compares the counts.
func (b *bench) counts() {
	patient := filepath.Join(b.dir, "patient")
	if out, err := exec.Command("go", "build", "-o", patient, "../../internal/syscalls/testdata/patient").CombinedOutput(); err != nil {
		log.Fatalf("build patient: %v\n%s", err, out)
	}
	args := []string{patient, "-solo", "-child", "-threads", "4", "-calls", "50000"}
	out, err := exec.Command(b.gosleuth, append([]string{"syscalls", "--format", "json", "--"}, args...)...).Output()
	if err != nil {
		log.Fatalf("gosleuth: %v", err)
	}
	g := map[string]float64{}
	var rep struct {
		Total    float64 `json:"total"`
		Syscalls []struct {
			Name  string  `json:"name"`
			Count float64 `json:"count"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		log.Fatal(err)
	}
	for _, s := range rep.Syscalls {
		g[s.Name] = s.Count
	}
	cmd := exec.Command("perf", append([]string{"stat", "-x", ",", "-e", "syscalls:sys_enter_*", "--"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	cmd.Start()
	p := map[string]float64{}
	var ptotal float64
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_") {
			continue
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(f[2], "syscalls:sys_enter_")
		p[name] += n
		ptotal += n
	}
	cmd.Wait()
	fmt.Printf("\ncounts of the same workload (%s) under gosleuth and perf stat:\n", strings.Join(args[1:], " "))
	fmt.Printf("  %-10s %10s %10s %8s\n", "syscall", "gosleuth", "perf stat", "ratio")
	for _, name := range []string{"getppid", "execve", "clone", "futex", "rt_sigaction", "mmap"} {
		fmt.Printf("  %-10s %10.0f %10.0f %8.4f\n", name, g[name], p[name], g[name]/p[name])
	}
	fmt.Printf("  %-10s %10.0f %10.0f %8.4f\n", "total", rep.Total, ptotal, rep.Total/ptotal)
	fmt.Printf("  (perf stat counts the command's own execve, which gosleuth, starting after it, does not)\n")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
