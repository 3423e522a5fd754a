//go:build linux

package proc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// The fixtures under testdata/proc were captured with testdata/capture.sh
// from a live host: PID 1 (11 threads), kthreadd (2), a process whose name
// is "a) b" (8279), a zombie (8286) and its parent (8284).
func TestReaderFixtures(t *testing.T) {
	r := newTestReader(t, Options{Root: "testdata/proc"})
	var s Snapshot
	mustSnapshot(t, r, &s)
	var pids []int32
	for _, p := range s.Procs {
		pids = append(pids, p.PID)
	}
	if fmt.Sprint(pids) != "[1 2 8279 8284 8286]" {
		t.Fatalf("pids = %v", pids)
	}
	page := uint64(os.Getpagesize())
	one := s.Find(1)
	if one.Comm != "process_api" || one.Threads != 11 || len(s.TasksOf(one)) != 11 {
		t.Errorf("pid 1: comm %q threads %d tasks %d", one.Comm, one.Threads, len(s.TasksOf(one)))
	}
	// Context switches are summed over all threads, not taken from the
	// process status (which counts the main thread only: 329).
	if one.VolCtxsw != 6122 || one.InvolCtxsw != 441 {
		t.Errorf("pid 1 switches = %d/%d, want 6122/441", one.VolCtxsw, one.InvolCtxsw)
	}
	if one.UTime != 22 || one.STime != 56 || one.CUTime != 2411 || one.CSTime != 1045 || one.RSSBytes != 1983*page {
		t.Errorf("pid 1 times/rss = %+v", *one)
	}
	if one.FDs != 48 || one.Known&KnownFDs == 0 || one.FDLimit != 32768 {
		t.Errorf("pid 1 fds = %d/%d known %b", one.FDs, one.FDLimit, one.Known)
	}
	if one.Known&KnownIO != 0 {
		t.Errorf("pid 1 io was unreadable when captured, but Known has KnownIO")
	}
	if !strings.HasPrefix(one.Cmdline, "/process_api --firecracker-init --addr") {
		t.Errorf("pid 1 cmdline = %q", one.Cmdline)
	}
	// SkipCmdline leaves the command line unread and nothing else.
	rs := newTestReader(t, Options{Root: "testdata/proc", SkipCmdline: true})
	var ss Snapshot
	mustSnapshot(t, rs, &ss)
	if o := ss.Find(1); o == nil || o.Cmdline != "" || o.Comm != one.Comm || o.Cgroup != one.Cgroup || o.FDs != one.FDs || o.Known != one.Known {
		t.Errorf("pid 1 with SkipCmdline = %+v, want %+v without its command line", o, *one)
	}
	ab := s.Find(8279)
	if ab.Comm != "a) b" || ab.State != 'S' || ab.PPID != 1 || ab.StartTime != 39658 || ab.Cmdline != "/tmp/a) b 300" {
		t.Errorf("pid 8279 = %+v", *ab)
	}
	if ab.Known&KnownIO == 0 || ab.FDLimit != 20000 {
		t.Errorf("pid 8279 io/limit: known %b limit %d", ab.Known, ab.FDLimit)
	}
	z := s.Find(8286)
	if z.State != 'Z' || z.RSSBytes != 0 || z.Cmdline != "" || z.FDs != 0 {
		t.Errorf("zombie = %+v", *z)
	}
	kt := s.Find(2)
	if !kt.Kernel || kt.Comm != "kthreadd" || kt.PPID != 0 {
		t.Errorf("kthreadd = %+v", *kt)
	}
	if s.Find(3) != nil {
		t.Errorf("Find(3) found a process that is not there")
	}

	// Leaving kernel threads out.
	r2 := newTestReader(t, Options{Root: "testdata/proc", SkipKernelThreads: true})
	var s2 Snapshot
	mustSnapshot(t, r2, &s2)
	if s2.Find(2) != nil || len(s2.Procs) != 4 {
		t.Errorf("SkipKernelThreads kept %d procs", len(s2.Procs))
	}
}

func newTestReader(t *testing.T, opts Options) *Reader {
	t.Helper()
	r, err := NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func mustSnapshot(t *testing.T, r *Reader, s *Snapshot) {
	t.Helper()
	if err := r.Snapshot(s); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the fixture tree into a temporary root the test may edit.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestReaderPIDReuse rewrites a process's start time between two reads: the
// reader must treat it as a new process, and Rates must not mix the two.
func TestReaderPIDReuse(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	r := newTestReader(t, Options{Root: root, FullEvery: 1})
	var a, b, c Snapshot
	mustSnapshot(t, r, &a)
	stat := filepath.Join(root, "8279", "stat")
	old, _ := os.ReadFile(stat)
	reused := strings.Replace(string(old), " 39658 ", " 99999 ", 1)
	if reused == string(old) {
		t.Fatal("fixture does not hold the expected start time")
	}
	if err := os.WriteFile(stat, []byte(reused), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSnapshot(t, r, &b)
	mustSnapshot(t, r, &c)
	p := c.Find(8279)
	if p == nil || p.StartTime != 99999 {
		t.Fatalf("after reuse: %+v", p)
	}
	var rates Rates
	rates.Compute(&a, &c)
	for _, pr := range rates.Procs {
		if pr.Proc.PID == 8279 && !pr.New {
			t.Errorf("reused PID not reported as new")
		}
		if pr.Proc.PID == 1 && pr.New {
			t.Errorf("PID 1 reported as new")
		}
	}
}

// TestReaderVanished removes a process from the fixture tree: it drops out
// without an error.
func TestReaderVanished(t *testing.T) {
	root := copyTree(t, "testdata/proc")
	r := newTestReader(t, Options{Root: root, FullEvery: 1})
	var s Snapshot
	mustSnapshot(t, r, &s)
	kept := s.Stats.KeptFDs
	if err := os.RemoveAll(filepath.Join(root, "8279")); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(&s); err != nil {
		t.Fatalf("snapshot after a process vanished: %v", err)
	}
	if s.Find(8279) != nil || len(s.Procs) != 4 {
		t.Errorf("vanished process still listed (%d procs)", len(s.Procs))
	}
	if s.Stats.KeptFDs >= kept {
		t.Errorf("kept fds %d, was %d: the vanished process's descriptors were not released", s.Stats.KeptFDs, kept)
	}
	if r.nTasks != len(s.Tasks) {
		t.Errorf("the fd budget counts %d tasks, the snapshot has %d", r.nTasks, len(s.Tasks))
	}
}

// helper modes run in a child copy of the test binary.
func TestMain(m *testing.M) {
	switch os.Getenv("GOSLEUTH_PROC_HELPER") {
	case "":
		os.Exit(m.Run())
	case "threads":
		helperThreads()
	case "spin":
		helperSpin()
	case "wake":
		helperWake()
	case "grow":
		helperGrow()
	case "burnt":
		helperBurnt()
	}
	os.Exit(0)
}

const helperThreadCount = 8

// helperThreads holds helperThreadCount OS threads blocked in read(2) on a
// pipe, sets its soft fd limit to 777 and opens a known number of files.
func helperThreads() {
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 777, Max: 4096})
	var fds [2]int
	syscall.Pipe(fds[:])
	for range helperThreadCount {
		go func() {
			runtime.LockOSThread()
			var b [1]byte
			syscall.Read(fds[0], b[:])
		}()
	}
	for range 10 {
		os.Open("/dev/null")
	}
	time.Sleep(200 * time.Millisecond)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the test closes stdin
}

// helperGrow starts one more OS thread, blocked in read(2) for good, for
// each byte on its stdin.
func helperGrow() {
	var fds [2]int
	syscall.Pipe(fds[:])
	fmt.Println("ready")
	var b [1]byte
	for {
		if n, _ := os.Stdin.Read(b[:]); n == 0 {
			os.Exit(0)
		}
		go func() {
			runtime.LockOSThread()
			var b [1]byte
			syscall.Read(fds[0], b[:])
		}()
	}
}

// helperBurnt spends user and system time on each of 3 locked threads
// until each thread's stat shows at least 3 ticks of both (at most 2 s),
// then keeps them blocked in read(2): a still process with CPU times to
// split. The system time is reads of /dev/zero a megabyte at a time; how
// the kernel's tick sampling splits it varies (under -race a thread's
// 100 ms of such reads showed 1 to 4 ticks of system time), hence the
// thread's own stat decides when it has burnt enough.
func helperBurnt() {
	var fds [2]int
	syscall.Pipe(fds[:])
	zero, err := os.Open("/dev/zero")
	if err != nil {
		panic(err)
	}
	var done sync.WaitGroup
	for range 3 {
		done.Add(1)
		go func() {
			runtime.LockOSThread()
			buf := make([]byte, 1<<20)
			x := 0
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
				for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
					x++
				}
				for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
					syscall.Read(int(zero.Fd()), buf)
				}
				b, _ := os.ReadFile("/proc/thread-self/stat")
				var sf statFields
				if parseStat(b, &sf) == nil && sf.UTime >= 3 && sf.STime >= 3 {
					break
				}
			}
			done.Done()
			var b [1]byte
			syscall.Read(fds[0], b[:])
		}()
	}
	done.Wait()
	time.Sleep(20 * time.Millisecond)
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
}

func helperSpin() {
	fmt.Println("ready")
	go func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	x := 0
	for {
		x++
	}
}

// helperWake wakes every 2 ms on a locked thread, a timer-loop patient.
func helperWake() {
	fmt.Println("ready")
	go func() { io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	for {
		time.Sleep(2 * time.Millisecond)
	}
}

// startHelper starts the test binary in a helper mode and waits until it is
// ready. Closing stdin (done in cleanup) ends it.
func startHelper(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOSLEUTH_PROC_HELPER="+mode, "GOMAXPROCS=2")
	// Its input stays open while the test runs: it exits when that closes.
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if p := testbin.Start(t, cmd, testbin.Options{}); p.Ready() != "ready" {
		t.Fatalf("helper %s: %q", mode, p.Ready())
	}
	return cmd
}

// startShell starts sh (a single-threaded process) running script; it is
// killed in cleanup.
func startShell(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func requireProc(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Linux)
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Missing(t, testenv.Linux, "no mounted /proc: "+err.Error())
	}
}

func TestReaderLiveThreadsFDs(t *testing.T) {
	requireProc(t)
	cmd := startHelper(t, "threads")
	pid := cmd.Process.Pid
	r := newTestReader(t, Options{PIDs: []int{pid}, FullEvery: 2})
	var s Snapshot
	mustSnapshot(t, r, &s)
	p := s.Find(int32(pid))
	if p == nil {
		t.Fatalf("helper %d not found", pid)
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if int(p.Threads) != len(tasks) || len(s.TasksOf(p)) != len(tasks) || p.Threads < helperThreadCount+1 {
		t.Errorf("threads = %d (%d task rows), kernel lists %d, want >= %d", p.Threads, len(s.TasksOf(p)), len(tasks), helperThreadCount+1)
	}
	if int(p.FDs) != len(fds) || p.FDs < 13 {
		t.Errorf("fds = %d, kernel lists %d", p.FDs, len(fds))
	}
	if p.FDLimit != 777 {
		t.Errorf("fd limit = %d, want 777", p.FDLimit)
	}
	if p.GoVersion != runtime.Version() {
		t.Errorf("go version = %q, want %q", p.GoVersion, runtime.Version())
	}
	if p.Known&(KnownFDs|KnownFDLimit|KnownExe|KnownCtxsw) != KnownFDs|KnownFDLimit|KnownExe|KnownCtxsw {
		t.Errorf("known = %b", p.Known)
	}
	var rss uint64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid)); err == nil {
		f := strings.Fields(string(b))
		n, _ := strconv.ParseUint(f[1], 10, 64)
		rss = n * uint64(os.Getpagesize())
	}
	if p.RSSBytes == 0 || p.RSSBytes > 2*rss || p.RSSBytes < rss/2 {
		t.Errorf("rss = %d, statm says %d", p.RSSBytes, rss)
	}

	// Steady state: no file is opened again, not even in a full pass, and
	// a refresh that is not full costs about one read per thread.
	sawFull, sawGated := false, false
	for range 4 {
		time.Sleep(20 * time.Millisecond)
		mustSnapshot(t, r, &s)
		if s.Stats.Opens != 0 {
			t.Errorf("steady refresh opened %d files: %+v", s.Stats.Opens, s.Stats)
		}
		if s.Stats.Full {
			sawFull = true
			continue
		}
		sawGated = true
		if n := len(s.Tasks); s.Stats.Reads > n+n/2+2 {
			t.Errorf("refresh of %d tasks did %d reads, want <= 1.5 per task", n, s.Stats.Reads)
		}
	}
	if !sawFull || !sawGated {
		t.Errorf("saw full refresh %v, gated refresh %v", sawFull, sawGated)
	}

	// The process exits: it drops out silently and its descriptors are freed.
	cmd.Process.Kill()
	cmd.Wait()
	if err := r.Snapshot(&s); err != nil {
		t.Fatalf("snapshot after exit: %v", err)
	}
	if len(s.Procs) != 0 || s.Stats.KeptFDs != 0 || r.nTasks != 0 {
		t.Errorf("after exit: %d procs, %d kept fds, %d tasks in the budget", len(s.Procs), s.Stats.KeptFDs, r.nTasks)
	}
}

// ticks reads utime+stime of a process independently of the reader.
func ticks(t *testing.T, pid int) (uint64, uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	k, _ := strconv.ParseUint(f[12], 10, 64)
	return u, k
}

func TestRatesLiveCPU(t *testing.T) {
	requireProc(t)
	cmd := startHelper(t, "spin")
	pid := cmd.Process.Pid
	r := newTestReader(t, Options{PIDs: []int{pid}})
	var a, b Snapshot
	r.Snapshot(&a)
	u0, s0 := ticks(t, pid)
	t0 := time.Now()
	time.Sleep(time.Second)
	r.Snapshot(&b)
	u1, s1 := ticks(t, pid)
	kernelPct := float64(u1+s1-u0-s0) / time.Since(t0).Seconds()
	var rates Rates
	rates.Compute(&a, &b)
	pr := rates.Procs[0]
	got := pr.UserPct + pr.SysPct
	// A spinner is always running or waiting for a CPU: on a loaded machine
	// the second part grows, but the two together stay near 100%.
	if pr.New || got < 5 || got+pr.RunQueuePct < 60 {
		t.Fatalf("spinning process: %+v", pr)
	}
	if d := got - kernelPct; d > 3 || d < -3 {
		t.Errorf("cpu %.1f%%, kernel counters over the same window %.1f%%", got, kernelPct)
	}
	if pr.UserPct < 5*pr.SysPct {
		t.Errorf("a user-space spin shows user %.1f%% sys %.1f%%", pr.UserPct, pr.SysPct)
	}
}

// sumVol sums voluntary switches over /proc/PID/task/*/status.
func sumVol(t *testing.T, pid int) uint64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var sum uint64
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		v, _, err := parseStatusCtxsw(b)
		if err == nil {
			sum += v
		}
	}
	return sum
}

func TestRatesLiveWakeups(t *testing.T) {
	requireProc(t)
	waker := startHelper(t, "wake")
	idle := startHelper(t, "threads")
	r := newTestReader(t, Options{PIDs: []int{waker.Process.Pid, idle.Process.Pid}})
	var a, b Snapshot
	r.Snapshot(&a)
	v0 := sumVol(t, waker.Process.Pid)
	time.Sleep(time.Second)
	r.Snapshot(&b)
	v1 := sumVol(t, waker.Process.Pid)
	var rates Rates
	rates.Compute(&a, &b)
	var wake, quiet float64
	for _, pr := range rates.Procs {
		switch int(pr.Proc.PID) {
		case waker.Process.Pid:
			wake = pr.VolPerSec
			want := float64(v1-v0) / rates.Interval.Seconds()
			if d := pr.VolPerSec - want; d > 0.1*want || d < -0.1*want {
				t.Errorf("waker: %.0f wake-ups/s, kernel per-thread sum %.0f", pr.VolPerSec, want)
			}
		case idle.Process.Pid:
			quiet = pr.VolPerSec
		}
	}
	// A 2 ms sleep loop wakes at most ~500 times a second, plus runtime
	// threads; an idle Go process (threads blocked in read) barely wakes,
	// though on a busy machine its runtime still does a little.
	if wake < 150 || wake > 3000 || quiet > 100 || wake < 3*quiet {
		t.Errorf("waker %.0f wake-ups/s, idle %.0f", wake, quiet)
	}
}

// TestReaderFDCap runs with a tiny descriptor cap: figures stay right and
// the cap holds.
func TestReaderFDCap(t *testing.T) {
	requireProc(t)
	capped := newTestReader(t, Options{MaxFDs: 16})
	full := newTestReader(t, Options{})
	var a, b Snapshot
	before := listPIDs(t)
	// The Go runtime may start a thread of this process between the two
	// readers' snapshots, so each reader's thread count is checked against
	// the kernel's count taken around its own snapshot.
	var capLo, capHi, fullLo, fullHi int
	for range 2 {
		capLo = countTasks(t)
		mustSnapshot(t, capped, &a)
		capHi = countTasks(t)
		fullLo = countTasks(t)
		mustSnapshot(t, full, &b)
		fullHi = countTasks(t)
	}
	after := listPIDs(t)
	if capped.nTasks != len(a.Tasks) || full.nTasks != len(b.Tasks) {
		t.Errorf("budget counts %d and %d tasks, snapshots hold %d and %d", capped.nTasks, full.nTasks, len(a.Tasks), len(b.Tasks))
	}
	if a.Stats.KeptFDs > 16 {
		t.Errorf("kept %d fds over a cap of 16", a.Stats.KeptFDs)
	}
	if a.Stats.Opens == 0 {
		t.Errorf("beyond the cap files must be opened each time; stats %+v", a.Stats)
	}
	self := int32(os.Getpid())
	pa, pb := a.Find(self), b.Find(self)
	if pa == nil || pb == nil || pa.StartTime != pb.StartTime || pa.FDLimit != pb.FDLimit {
		t.Fatalf("capped and uncapped readers disagree on this process: %+v vs %+v", pa, pb)
	}
	if int(pa.Threads) < capLo || int(pa.Threads) > capHi {
		t.Errorf("capped reader: %d threads, the kernel listed %d before and %d after its snapshot", pa.Threads, capLo, capHi)
	}
	if int(pb.Threads) < fullLo || int(pb.Threads) > fullHi {
		t.Errorf("uncapped reader: %d threads, the kernel listed %d before and %d after its snapshot", pb.Threads, fullLo, fullHi)
	}
	// Both see every process that lived through both snapshots (on a
	// host starting thousands of processes a second, the two snapshots'
	// counts differ by the ones born or gone between them).
	stable, missed := 0, 0
	for pid := range before {
		if !after[pid] {
			continue
		}
		stable++
		if a.Find(pid) == nil || b.Find(pid) == nil {
			missed++
			t.Errorf("process %d lived through both snapshots: capped reader saw it %v, uncapped %v", pid, a.Find(pid) != nil, b.Find(pid) != nil)
		}
	}
	if stable < 3 || missed > 0 {
		t.Errorf("%d processes lived through both snapshots, %d missed", stable, missed)
	}
}

// listPIDs lists the processes in /proc now.
// countTasks counts this process's threads in /proc/self/task.
func countTasks(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatalf("list /proc/self/task: %v", err)
	}
	return len(ents)
}

func listPIDs(t *testing.T) map[int32]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]bool{}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out[int32(n)] = true
		}
	}
	return out
}

// TestReaderCloseReleases checks that Close leaves no descriptor behind.
func TestReaderCloseReleases(t *testing.T) {
	requireProc(t)
	before, _ := os.ReadDir("/proc/self/fd")
	r, err := NewReader(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	r.Snapshot(&s)
	if s.Stats.KeptFDs < len(s.Procs) {
		t.Errorf("kept only %d fds for %d processes", s.Stats.KeptFDs, len(s.Procs))
	}
	r.Close()
	r.Close()
	after, _ := os.ReadDir("/proc/self/fd")
	if len(after) > len(before) {
		t.Errorf("fds before %d, after Close %d", len(before), len(after))
	}
	if err := r.Snapshot(&s); err == nil {
		t.Errorf("Snapshot after Close succeeded")
	}
}

// BenchmarkSnapshot measures one steady-state refresh of the whole host,
// as top reads it (taskstats asked for the switch counts where it can be);
// allocs/op must stay at zero (goal: < 1 KB per refresh).
func BenchmarkSnapshot(b *testing.B) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		b.Skip("needs /proc")
	}
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"plain", Options{}},
		{"top", Options{DeferNew: true, SkipKernelThreads: true, SwitchesFromTaskstats: true}},
		// As top reads as root: with the task iterator.
		{"top-bpf", Options{DeferNew: true, SkipKernelThreads: true, SwitchesFromTaskstats: true, TasksFromBPF: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r, err := NewReader(bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			var s Snapshot
			for range 2 {
				r.Snapshot(&s)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Snapshot(&s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(s.Tasks)), "tasks")
			b.ReportMetric(float64(s.Stats.TaskstatsThreads), "asked")
		})
	}
}

func BenchmarkRates(b *testing.B) {
	r, err := NewReader(Options{Root: "testdata/proc"})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var s1, s2 Snapshot
	r.Snapshot(&s1)
	r.Snapshot(&s2)
	var rates Rates
	b.ReportAllocs()
	for b.Loop() {
		rates.Compute(&s1, &s2)
	}
}

// TestReaderFDCountFallback counts descriptors by listing /proc/PID/fd, as
// on kernels before 6.2 where fstat does not report the count, and checks it
// against the fstat count.
func TestReaderFDCountFallback(t *testing.T) {
	requireProc(t)
	cmd := startHelper(t, "threads")
	pid := cmd.Process.Pid
	fast := newTestReader(t, Options{PIDs: []int{pid}})
	slow := newTestReader(t, Options{PIDs: []int{pid}})
	if !fast.fdSize {
		t.Skip("this kernel does not report descriptor counts through fstat (Linux < 6.2): only the fallback exists")
	}
	slow.fdSize = false
	var a, b Snapshot
	mustSnapshot(t, fast, &a)
	mustSnapshot(t, slow, &b)
	pa, pb := a.Find(int32(pid)), b.Find(int32(pid))
	if pa == nil || pb == nil || pa.FDs != pb.FDs || pb.FDs < 13 || pb.Known&KnownFDs == 0 {
		t.Errorf("fstat count %+v, listing count %+v", pa, pb)
	}
}

// TestReaderDeferNew: with DeferNew, a process that appears after the first
// whole-host snapshot is read by its stat alone at first sight, in full at
// the next, and the rates of that next interval take its threads as their
// baseline rather than counting every switch since it started.
func TestReaderDeferNew(t *testing.T) {
	requireProc(t)
	r := newTestReader(t, Options{DeferNew: true, SkipKernelThreads: true})
	var a, b, c Snapshot
	if err := r.Snapshot(&a); err != nil {
		t.Fatal(err)
	}
	waker := startHelper(t, "wake")
	pid := int32(waker.Process.Pid)
	time.Sleep(300 * time.Millisecond) // the helper wakes ~150 times meanwhile
	if err := r.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	p := b.Find(pid)
	if p == nil {
		t.Fatal("the new process is missing from the second snapshot")
	}
	if p.Known&(KnownCtxsw|KnownExe) != 0 || p.Cmdline != "" || len(b.TasksOf(p)) != 0 || p.UTime+p.STime == 0 && p.RSSBytes == 0 {
		t.Errorf("first sight: known %b, cmdline %q, %d tasks, rss %d: want its stat alone", p.Known, p.Cmdline, len(b.TasksOf(p)), p.RSSBytes)
	}
	if b.Stats.Denied && !a.Stats.Denied {
		t.Error("a deferred process made the snapshot look denied")
	}
	time.Sleep(500 * time.Millisecond)
	if err := r.Snapshot(&c); err != nil {
		t.Fatal(err)
	}
	p = c.Find(pid)
	if p == nil || p.Known&KnownCtxsw == 0 || p.Cmdline == "" || len(c.TasksOf(p)) == 0 {
		t.Fatalf("second sight: %+v: want it read in full", p)
	}
	var rates Rates
	rates.Compute(&b, &c)
	for _, pr := range rates.Procs {
		if pr.Proc.PID == pid && (pr.New || pr.VolPerSec != 0) {
			t.Errorf("the interval after first sight: new %v, %.0f wake-ups/s: want a baseline (0), not every switch since start", pr.New, pr.VolPerSec)
		}
	}
	// Processes there from the first snapshot were read in full.
	self := c.Find(int32(os.Getpid()))
	if self == nil || self.Known&KnownCtxsw == 0 {
		t.Errorf("this test's own process was not read in full: %+v", self)
	}
}

// TestReaderLateIdentity: with LateIdentity, a process that appears after
// the first whole-host snapshot has its CPU times, threads and switch
// counts at first sight, and its identity (cgroup, executable) and
// descriptors at the next; a process there from the first snapshot has
// them all at once. With the task iterator too, as root.
func TestReaderLateIdentity(t *testing.T) {
	requireProc(t)
	for _, bpf := range []bool{false, true} {
		t.Run(map[bool]string{false: "files", true: "iterator"}[bpf], func(t *testing.T) {
			if bpf {
				testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
			}
			r := newTestReader(t, Options{LateIdentity: true, SkipKernelThreads: true, SkipCmdline: true, TasksFromBPF: bpf})
			var a, b, c Snapshot
			mustSnapshot(t, r, &a)
			if self := a.Find(int32(os.Getpid())); self == nil || self.Known&KnownExe == 0 || self.Cgroup == "" || self.FDs < 0 {
				t.Fatalf("this test's own process at the first snapshot: %+v: want its identity and descriptors", self)
			}
			waker := startHelper(t, "wake")
			pid := int32(waker.Process.Pid)
			time.Sleep(300 * time.Millisecond) // the helper wakes ~150 times meanwhile
			mustSnapshot(t, r, &b)
			p := b.Find(pid)
			if p == nil {
				t.Fatal("the new process is missing from the second snapshot")
			}
			if p.Known&KnownCtxsw == 0 || p.VolCtxsw < 20 || len(b.TasksOf(p)) == 0 {
				t.Errorf("first sight: known %b, %d voluntary switches, %d tasks: want its threads and switches", p.Known, p.VolCtxsw, len(b.TasksOf(p)))
			}
			if p.Known&KnownExe != 0 || p.GoVersion != "" || p.Cgroup != "" || p.FDs != -1 {
				t.Errorf("first sight: known %b, Go %q, cgroup %q, %d fds: want no identity and no descriptors yet", p.Known, p.GoVersion, p.Cgroup, p.FDs)
			}
			mustSnapshot(t, r, &c)
			p = c.Find(pid)
			if p == nil || p.Known&KnownExe == 0 || p.GoVersion == "" || p.Cgroup == "" || p.FDs < 3 {
				t.Fatalf("second sight: %+v: want its identity (a Go binary) and descriptors", p)
			}
		})
	}
}

// TestReaderIdleBackoff edits a fixture thread that has sat still: with
// IdleBackoff it is checked once in that many refreshes, so the refreshes
// read fewer files, and its new counters arrive within that many.
func TestReaderIdleBackoff(t *testing.T) {
	const back = 4
	root := copyTree(t, "testdata/proc")
	r := newTestReader(t, Options{Root: root, IdleBackoff: back, FullEvery: 1000})
	plain := newTestReader(t, Options{Root: root, FullEvery: 1000})
	var s, ps Snapshot
	var reads, plainReads int
	for i := range 2 * back {
		mustSnapshot(t, r, &s)
		mustSnapshot(t, plain, &ps)
		if i >= back+1 {
			reads += s.Stats.Reads
			plainReads += ps.Stats.Reads
			if s.Stats.Idle == 0 {
				t.Errorf("refresh %d: no thread left unchecked after %d still refreshes", i, back)
			}
		}
	}
	t.Logf("reads over %d refreshes: %d with back-off, %d without", back-1, reads, plainReads)
	if reads*2 > plainReads {
		t.Errorf("back-off read %d times, checking every thread %d: want at most half", reads, plainReads)
	}
	// The thread runs: schedstat, stat and status move.
	dir := filepath.Join(root, "8279", "task", "8279")
	edit := func(name, old, new string) {
		t.Helper()
		p := filepath.Join(dir, name)
		b, _ := os.ReadFile(p)
		if !strings.Contains(string(b), old) {
			t.Fatalf("%s does not hold %q", name, old)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("schedstat", "968323 4188 2", "9968323 4188 9")
	edit("status", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\t8\n")
	seenAt := -1
	for i := range back {
		mustSnapshot(t, r, &s)
		if p := s.Find(8279); p != nil && p.VolCtxsw >= 8 {
			seenAt = i + 1
			break
		}
	}
	if seenAt < 0 {
		t.Fatalf("the thread's new switches not seen within %d refreshes", back)
	}
	t.Logf("seen at refresh %d of at most %d", seenAt, back)
	// Having run, it is checked at every refresh again.
	edit("schedstat", "9968323 4188 9", "9968999 4188 10")
	edit("status", "voluntary_ctxt_switches:\t8\n", "voluntary_ctxt_switches:\t9\n")
	mustSnapshot(t, r, &s)
	if p := s.Find(8279); p == nil || p.VolCtxsw != 9 {
		t.Errorf("a thread that just ran was not checked at the next refresh: %+v", p)
	}
}

// TestReaderSwitchesOnly: with SwitchesOnly and SkipIO, threads are read by
// their status alone and io not at all; the switch counts summed per process
// and every process figure stay those of a full read, for fewer reads.
func TestReaderSwitchesOnly(t *testing.T) {
	lean := newTestReader(t, Options{Root: "testdata/proc", SwitchesOnly: true, SkipIO: true})
	plain := newTestReader(t, Options{Root: "testdata/proc"})
	var s, ps Snapshot
	mustSnapshot(t, lean, &s)
	mustSnapshot(t, plain, &ps)
	if len(s.Procs) != len(ps.Procs) || len(s.Tasks) != len(ps.Tasks) {
		t.Fatalf("lean read %d procs, %d tasks; plain %d, %d", len(s.Procs), len(s.Tasks), len(ps.Procs), len(ps.Tasks))
	}
	for i := range s.Procs {
		p, q := s.Procs[i], ps.Procs[i]
		if p.VolCtxsw != q.VolCtxsw || p.InvolCtxsw != q.InvolCtxsw || p.UTime != q.UTime || p.STime != q.STime ||
			p.RSSBytes != q.RSSBytes || p.FDs != q.FDs || p.FDLimit != q.FDLimit || p.Threads != q.Threads {
			t.Errorf("pid %d: lean %+v, plain %+v", p.PID, p, q)
		}
		if p.Known&KnownIO != 0 || p.SyscR != 0 {
			t.Errorf("pid %d: io read despite SkipIO (known %b)", p.PID, p.Known)
		}
	}
	if p := ps.Find(8279); p.Known&KnownIO == 0 {
		t.Fatal("fixture 8279's io was not readable to the plain reader: the test checks nothing")
	}
	for i := range s.Tasks {
		lt, pt := s.Tasks[i], ps.Tasks[i]
		if lt.VolCtxsw != pt.VolCtxsw || lt.InvolCtxsw != pt.InvolCtxsw || lt.RunNS != pt.RunNS {
			t.Errorf("tid %d switches/run: lean %+v, plain %+v", lt.TID, lt, pt)
		}
		if lt.UTime != 0 || lt.STime != 0 || lt.Comm != "" || lt.State != 0 {
			t.Errorf("tid %d: stat fields read despite SwitchesOnly: %+v", lt.TID, lt)
		}
	}
	if pt := ps.Tasks[0]; pt.Comm == "" || pt.State == 0 {
		t.Fatalf("plain reader's first thread has no stat fields (%+v): the test checks nothing", pt)
	}
	if s.Stats.Reads >= ps.Stats.Reads {
		t.Errorf("lean read %d files, plain %d: want fewer", s.Stats.Reads, ps.Stats.Reads)
	}
}

// TestReaderNewPIDsOnly: with NewPIDsOnly, a process started between two
// refreshes (no full pass) is found by listing the PIDs above the last one
// only, and one that exits is dropped; on a fixture tree the option is
// inert and every PID is listed.
func TestReaderNewPIDsOnly(t *testing.T) {
	requireProc(t)
	r := newTestReader(t, Options{NewPIDsOnly: true, SkipKernelThreads: true, FullEvery: 1000})
	if !r.seekScan {
		// A host's own procfs lists from a position: only a mount of
		// another PID namespace does not, and CI's must.
		testenv.Missing(t, testenv.Linux, "this /proc does not list PIDs from a position (another PID namespace's mount?)")
	}
	var a, b, c Snapshot
	mustSnapshot(t, r, &a)
	helper := startHelper(t, "wake")
	pid := int32(helper.Process.Pid)
	mustSnapshot(t, r, &b)
	if b.Find(pid) == nil {
		t.Fatalf("the process started since the last refresh (%d) is missing", pid)
	}
	t.Logf("listed %d PIDs at the first refresh, %d at the next", a.Stats.Listed, b.Stats.Listed)
	if b.Stats.Full || b.Stats.Listed == 0 || b.Stats.Listed >= a.Stats.Listed {
		t.Errorf("the second refresh listed %d PIDs (full %v), the first %d: want only the new ones", b.Stats.Listed, b.Stats.Full, a.Stats.Listed)
	}
	for _, p := range a.Procs {
		if p.PID != int32(os.Getpid()) && p.PID != 1 {
			continue
		}
		if b.Find(p.PID) == nil {
			t.Errorf("pid %d, known before and not listed again, dropped out", p.PID)
		}
	}
	helper.Process.Kill()
	helper.Wait()
	mustSnapshot(t, r, &c)
	if c.Find(pid) != nil {
		t.Errorf("the process that exited (%d) is still there", pid)
	}

	fx := newTestReader(t, Options{Root: "testdata/proc", NewPIDsOnly: true, FullEvery: 1000})
	if fx.seekScan {
		t.Fatal("a fixture tree was taken for a procfs that lists from a position")
	}
	var s Snapshot
	mustSnapshot(t, fx, &s)
	mustSnapshot(t, fx, &s)
	if len(s.Procs) != 5 {
		t.Errorf("fixture tree with NewPIDsOnly: %d processes, want 5", len(s.Procs))
	}
}

// TestReaderIdleStatEvery: with IdleStatEvery, a process whose threads sit
// still has its stat re-read once in FullEvery*IdleStatEvery refreshes
// rather than at every full pass: a new RSS (reclaim moves it without the
// process running) arrives within that many refreshes, for fewer reads.
func TestReaderIdleStatEvery(t *testing.T) {
	const full, every = 2, 3
	root := copyTree(t, "testdata/proc")
	r := newTestReader(t, Options{Root: root, FullEvery: full, IdleStatEvery: every})
	plain := newTestReader(t, Options{Root: root, FullEvery: full})
	var s, ps Snapshot
	mustSnapshot(t, r, &s)
	mustSnapshot(t, plain, &ps)
	reads, plainReads := 0, 0
	for range full * every {
		mustSnapshot(t, r, &s)
		mustSnapshot(t, plain, &ps)
		reads += s.Stats.Reads
		plainReads += ps.Stats.Reads
	}
	t.Logf("reads over %d refreshes: %d with IdleStatEvery %d, %d without", full*every, reads, every, plainReads)
	if reads >= plainReads {
		t.Errorf("IdleStatEvery read %d times, full passes alone %d: want fewer", reads, plainReads)
	}
	page := uint64(os.Getpagesize())
	p := filepath.Join(root, "8279", "stat")
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), " 2990080 413 ") {
		t.Fatal("fixture 8279's stat does not hold RSS 413")
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), " 2990080 413 ", " 2990080 100 ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	seenAt := -1
	for i := range full * every {
		mustSnapshot(t, r, &s)
		if s.Find(8279).RSSBytes == 100*page {
			seenAt = i + 1
			break
		}
	}
	if seenAt < 0 {
		t.Fatalf("the new RSS of a still process not seen within %d refreshes", full*every)
	}
	t.Logf("new RSS seen at refresh %d of at most %d", seenAt, full*every)
}

// TestReaderIdleStatEveryFDs: under a descriptor cap that holds every
// thread's schedstat but not the processes' stat and task directories too,
// IdleStatEvery keeps the schedstat ones (read at every refresh) and opens
// the others when due, so a refresh where nothing ran opens nothing; without
// it, schedstat files are opened and closed at every refresh.
func TestReaderIdleStatEveryFDs(t *testing.T) {
	const maxFDs = 15 // the fixture tree's threads
	opens := func(opts Options) (int, int) {
		opts.Root, opts.MaxFDs, opts.FullEvery = "testdata/proc", maxFDs, 1000
		r := newTestReader(t, opts)
		var s Snapshot
		for range 3 {
			mustSnapshot(t, r, &s)
		}
		if len(s.Tasks) != maxFDs {
			t.Fatalf("the fixture tree has %d threads, the test wants %d", len(s.Tasks), maxFDs)
		}
		return s.Stats.Opens, s.Stats.KeptFDs
	}
	lean, leanKept := opens(Options{IdleStatEvery: 3})
	plain, plainKept := opens(Options{})
	t.Logf("third refresh: %d opens (%d kept) with IdleStatEvery, %d (%d kept) without", lean, leanKept, plain, plainKept)
	if lean != 0 {
		t.Errorf("with IdleStatEvery the third refresh opened %d files, want 0: every schedstat fits under the cap", lean)
	}
	if plain == 0 {
		t.Errorf("without IdleStatEvery the third refresh opened nothing: the cap does not squeeze, the test checks nothing")
	}
}

// TestReaderSingleThread: the one thread of a single-threaded process that
// runs is given its process's stat figures, and its own stat file is never
// opened; a multi-threaded process's threads are read on their own.
func TestReaderSingleThread(t *testing.T) {
	requireProc(t)
	spin := startShell(t, "while :; do :; done")
	multi := startHelper(t, "threads")
	pid := spin.Process.Pid
	r := newTestReader(t, Options{PIDs: []int{pid, multi.Process.Pid}})
	var a, b Snapshot
	mustSnapshot(t, r, &a)
	time.Sleep(500 * time.Millisecond)
	mustSnapshot(t, r, &b)
	own, _ := ticks(t, pid) // the process's; its thread's below
	tb, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	var tf statFields
	if err := parseStat(tb, &tf); err != nil {
		t.Fatal(err)
	}
	p := b.Find(int32(pid))
	if p == nil || p.Threads != 1 || len(b.TasksOf(p)) != 1 {
		t.Fatalf("spinner: %+v", p)
	}
	task := b.TasksOf(p)[0]
	if task.UTime != p.UTime || task.STime != p.STime || task.State != p.State || task.Comm != "sh" || !task.procTimes {
		t.Errorf("single thread %+v, process utime %d stime %d state %c", task, p.UTime, p.STime, p.State)
	}
	// The kernel's own figures for the thread, read just after: a spinner's
	// times move on, by a few ticks at most.
	if tf.UTime+tf.STime < task.UTime+task.STime || tf.UTime+tf.STime > task.UTime+task.STime+5 || own < task.UTime {
		t.Errorf("thread's stat says utime %d stime %d, reader %d %d", tf.UTime, tf.STime, task.UTime, task.STime)
	}
	if fd := r.slots[int32(pid)].tasks[0].statfd; fd >= 0 {
		t.Errorf("the single thread's stat was opened (fd %d)", fd)
	}
	var rates Rates
	rates.Compute(&a, &b)
	i := slices.IndexFunc(rates.Procs, func(pr ProcRate) bool { return pr.Proc.PID == int32(pid) })
	lo, _ := b.TaskRange(p)
	pr, tr := rates.Procs[i], rates.Tasks[lo]
	if pr.UserPct+pr.SysPct < 1 || tr.UserPct != pr.UserPct || tr.SysPct != pr.SysPct {
		t.Errorf("spinner cpu: process %.1f+%.1f%%, its thread %.1f+%.1f%%", pr.UserPct, pr.SysPct, tr.UserPct, tr.SysPct)
	}
	m := b.Find(int32(multi.Process.Pid))
	if m == nil || m.Threads < helperThreadCount {
		t.Fatalf("multi-threaded helper: %+v", m)
	}
	for _, mt := range b.TasksOf(m) {
		if mt.procTimes || mt.Comm == "" || mt.State == 0 {
			t.Errorf("tid %d of a multi-threaded process not read on its own: %+v", mt.TID, mt)
		}
	}
}

// TestRatesThreadTimesSource: a thread whose times changed source between
// two readings (its process gained or lost threads) gets no CPU rate for
// that interval; its switches and its kernel ticks (SysTicks) still count.
func TestRatesThreadTimesSource(t *testing.T) {
	for _, tc := range []struct {
		name           string
		before, after  bool // procTimes
		wantUser, want float64
	}{
		{"process times both", true, true, 50, 5},
		{"own times both", false, false, 50, 5},
		{"process then own", true, false, 0, 5},
		{"own then process", false, true, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			prev := Snapshot{Time: t0, Procs: []Proc{{PID: 7, Threads: 1, taskHi: 1}},
				Tasks: []Task{{TID: 7, UTime: 100, STime: 20, VolCtxsw: 10, procTimes: tc.before}}}
			cur := Snapshot{Time: t0.Add(time.Second), Procs: []Proc{{PID: 7, Threads: 2, taskHi: 2}},
				Tasks: []Task{{TID: 7, UTime: 150, STime: 27, VolCtxsw: 15, procTimes: tc.after}, {TID: 8, STime: 4}}}
			var r Rates
			r.Compute(&prev, &cur)
			if got := r.Tasks[0]; got.UserPct != tc.wantUser || got.VolPerSec != tc.want || got.New || got.SysTicks != 7 {
				t.Errorf("task rate %+v, want user %.0f%%, %.0f switches/s, 7 kernel ticks", got, tc.wantUser, tc.want)
			}
			if born := r.Tasks[1]; !born.New || born.SysTicks != 4 {
				t.Errorf("thread born in the interval: %+v, want all its 4 kernel ticks", born)
			}
		})
	}
}

// TestVolMerged: between two readings of a process, VolMerged and
// InvolMerged grow by the Vol and Invol that Rates gives it, threads
// created in between counted in full, for every process of the host, read
// from files or through the task iterator.
func TestVolMerged(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		need []testenv.Feature
	}{
		{"files", Options{SkipKernelThreads: true}, []testenv.Feature{testenv.Linux}},
		{"task iterator", Options{SkipKernelThreads: true, TasksFromBPF: true}, []testenv.Feature{testenv.Linux, testenv.Root, testenv.BPF}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.Require(t, tc.need...)
			r := newTestReader(t, tc.opts)
			grow := startHelper(t, "grow")
			startHelper(t, "wake") // a busy one
			var a, b Snapshot
			mustSnapshot(t, r, &a)
			wakeHelper(t, grow.Process.Pid) // one more thread
			time.Sleep(100 * time.Millisecond)
			mustSnapshot(t, r, &b)
			var rates Rates
			rates.Compute(&a, &b)
			compared := 0
			for i := range b.Procs {
				c := &b.Procs[i]
				p := a.Find(c.PID)
				if p == nil || p.StartTime != c.StartTime || p.Known&c.Known&KnownCtxsw == 0 {
					continue
				}
				compared++
				pr := &rates.Procs[i]
				if dv, di := c.VolMerged-p.VolMerged, c.InvolMerged-p.InvolMerged; dv != pr.Vol || di != pr.Invol {
					t.Errorf("process %d (%s): merged switches grew by %d and %d, Rates says %d and %d", c.PID, c.Comm, dv, di, pr.Vol, pr.Invol)
				}
				if dr := c.RunMerged - p.RunMerged; dr != pr.RunNS || !pr.RunKnown {
					t.Errorf("process %d (%s): merged run time grew by %d ns, Rates says %d (known %v)", c.PID, c.Comm, dr, pr.RunNS, pr.RunKnown)
				}
			}
			if compared < 2 {
				t.Fatalf("%d processes compared", compared)
			}
		})
	}
}
