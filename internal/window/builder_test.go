package window

import (
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"golang.org/x/sys/unix"
)

func newBuilder(t *testing.T, opts proc.Options, cfg Config) *Builder {
	t.Helper()
	r, err := proc.NewReader(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return NewBuilder(r, cfg)
}

// threadSwitches reads a thread's voluntary switches from its status.
func threadSwitches(t *testing.T, tid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("thread %d: no voluntary_ctxt_switches", tid)
	return 0
}

// TestWakeupsOfThreadsThatExit locks goroutines to threads inside a
// window, lets each sleep 300 times (a wake-up each), reads their switch
// counts, and lets the threads exit before the window ends. The window keeps every one of their
// switches; the delta of the live threads' sum (what doctor, load and
// stacks once took) loses them all.
func TestWakeupsOfThreadsThatExit(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	self := os.Getpid()
	b := newBuilder(t, proc.Options{PIDs: []int{self}}, Config{PIDs: []int{self}, NoFacts: true})
	s, err := b.Read()
	if err != nil {
		t.Fatal(err)
	}
	firstLive := s.Find(int32(self)).VolCtxsw
	// The locked goroutines may run on threads the runtime made before the
	// window: their switches from before it are not the window's.
	before := map[int]uint64{}
	for _, th := range s.TasksOf(s.Find(int32(self))) {
		before[int(th.TID)] = th.VolCtxsw
	}

	const threads, sleeps = 4, 300
	tids := make(chan int, threads)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			for range sleeps {
				time.Sleep(200 * time.Microsecond)
			}
			tids <- syscallGettid()
			<-release
		}()
	}
	var ids []int
	for range threads {
		ids = append(ids, <-tids)
	}
	time.Sleep(20 * time.Millisecond) // let each block on release
	switches := map[int]uint64{}
	for _, tid := range ids {
		switches[tid] = threadSwitches(t, tid) - before[tid]
		if switches[tid] < sleeps {
			t.Fatalf("thread %d switched %d times, fewer than its %d sleeps", tid, switches[tid], sleeps)
		}
	}
	if _, err := b.Read(); err != nil { // their last reading
		t.Fatal(err)
	}
	close(release)
	wg.Wait()
	// The runtime ends a thread whose goroutine exits locked, except the
	// main thread (and one it keeps for itself): those stay, and count in
	// both figures alike.
	var want uint64
	exited := 0
	deadline := time.Now().Add(2 * time.Second)
	for _, tid := range ids {
		for {
			if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err != nil {
				want += switches[tid]
				exited++
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if exited < 2 {
		t.Fatalf("only %d of %d locked threads exited", exited, threads)
	}
	s, err = b.Read()
	if err != nil {
		t.Fatal(err)
	}
	naive := proc.Delta(firstLive, s.Find(int32(self)).VolCtxsw)
	w := b.Window(self)
	if w == nil {
		t.Fatal("no window for the test process")
	}
	t.Logf("exited threads' switches %d; window %d; live-sum delta %d", want, w.VolCtxsw, naive)
	if w.VolCtxsw < want {
		t.Errorf("window wake-ups %d < %d, the switches of the threads that exited", w.VolCtxsw, want)
	}
	// The live-thread delta misses at least the exited threads' switches.
	if naive > w.VolCtxsw || w.VolCtxsw-naive < want {
		t.Errorf("the live-thread delta %d is within %d of the window's %d: it did not lose the exited threads' switches, so the test shows nothing", naive, want, w.VolCtxsw)
	}
	if w.Exited || w.Threads() == 0 || len(w.Series) != 3 {
		t.Errorf("window: exited %v, threads %d, %d points", w.Exited, w.Threads(), len(w.Series))
	}
}

// TestHostCPUsUnderTaskset runs a test binary pinned to CPU 0: its Host
// still counts the host's online CPUs, where runtime.NumCPU says 1.
func TestHostCPUsUnderTaskset(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	if os.Getenv("GOSLEUTH_PRINT_HOST") != "" {
		b := newBuilder(t, proc.Options{PIDs: []int{os.Getpid()}}, Config{NoFacts: true})
		if _, err := b.Read(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("host " + strconv.Itoa(b.Host().CPUs) + " numcpu " + strconv.Itoa(runtime.NumCPU()) + "\n")
		return
	}
	online, err := proc.OnlineCPUs() // sysfs: a second, independent count
	if err != nil {
		t.Fatal(err)
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) not found: %v", err)
	}
	cmd := exec.Command(taskset, "-c", "0", os.Args[0], "-test.run=^TestHostCPUsUnderTaskset$", "-test.v")
	cmd.Env = append(os.Environ(), "GOSLEUTH_PRINT_HOST=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "host " + strconv.Itoa(len(online)) + " numcpu 1\n"
	if !strings.Contains(string(out), want) {
		t.Errorf("pinned to CPU 0, the child printed %q; want %q", out, want)
	}
}

// TestDelta pins the argument order of the one counter subtraction.
func TestDelta(t *testing.T) {
	for _, tc := range []struct{ a, b, want uint64 }{
		{10, 25, 15}, {25, 10, 0}, {7, 7, 0}, {0, 1 << 63, 1 << 63},
	} {
		if got := proc.Delta(tc.a, tc.b); got != tc.want {
			t.Errorf("proc.Delta(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestDeferredProcessWindow: a whole-host reader that reads a new process
// by its stat alone until it is seen again (proc.Options.DeferNew, as the
// doctor's) gives a process started inside the window a window that begins
// at its first full reading, so its series never starts with an unknown
// descriptor count, which the descriptor rules would read as a rise.
func TestDeferredProcessWindow(t *testing.T) {
	b := newBuilder(t, proc.Options{SkipKernelThreads: true, DeferNew: true}, Config{NoFacts: true})
	if _, err := b.Read(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "exec 3</dev/null 4</dev/null 5</dev/null; exec sleep 10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// Until it is sleep (the shell's own descriptors differ).
	for i := 0; ; i++ {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if i == 1000 {
			t.Fatal("the child never became sleep")
		}
		time.Sleep(time.Millisecond)
	}
	var firstT time.Time
	for i := range 4 {
		s, err := b.Read()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			p := s.Find(int32(pid))
			if p == nil {
				t.Fatal("the child is not in the reading after it started")
			}
			if p.Known&proc.KnownFDs != 0 {
				t.Fatalf("first sight read the descriptors (%d): the reader did not defer it", p.FDs)
			}
		}
		if i == 1 {
			firstT = s.Time
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := b.Window(pid)
	if w == nil {
		t.Fatal("no window for the child")
	}
	t.Logf("series %+v", w.Series)
	if !w.FDsKnown || len(w.Series) != 3 {
		t.Fatalf("window of %d points (fds known %v), want the 3 full readings", len(w.Series), w.FDsKnown)
	}
	if !w.Start.Equal(firstT) {
		t.Errorf("window starts at %v, want its first full reading at %v", w.Start, firstT)
	}
	for _, p := range w.Series {
		if p.FDs < 6 || p.FDs != w.Series[0].FDs {
			t.Errorf("descriptor series %+v: want the same count of at least 6 throughout", w.Series)
			break
		}
	}
}

// TestCPUFromSchedstat spins a locked thread for 300 ms of its own CPU
// (its thread CPU clock, the kernel's sum_exec_runtime, which schedstat
// shows too) and lets the thread exit before the window ends. The window's
// CPU is the schedstat run time: at least the spin, kept though the thread
// is gone, and no more than the process's CPU by getrusage (which counts
// every thread, exited ones included, to the nanosecond).
func TestCPUFromSchedstat(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	self := os.Getpid()
	b := newBuilder(t, proc.Options{PIDs: []int{self}}, Config{PIDs: []int{self}, NoFacts: true})
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	if _, err := b.Read(); err != nil {
		t.Fatal(err)
	}
	spun := make(chan time.Duration)
	read := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		t0 := time.Duration(ts.Nano()) // the thread may have run before
		for {
			unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
			if d := time.Duration(ts.Nano()) - t0; d >= 300*time.Millisecond {
				spun <- d
				break
			}
		}
		<-read // the builder reads the thread alive once
	}()
	d := <-spun
	if _, err := b.Read(); err != nil {
		t.Fatal(err)
	}
	close(read)
	time.Sleep(100 * time.Millisecond) // the thread exits
	if _, err := b.Read(); err != nil {
		t.Fatal(err)
	}
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	w := b.Window(self)
	all := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	t.Logf("spun %v; window: run %.3fs (known %v), ticks %.2fs; getrusage %v", d, w.RunSec, w.RunKnown, w.TickUserSec+w.TickSysSec, all)
	if !w.RunKnown || math.Abs(w.CPUSec()-w.RunSec) > 1e-9 {
		t.Fatalf("the window's CPU is not the schedstat run time: %+v", w)
	}
	if got := time.Duration(w.RunSec * 1e9); got < d || got > all+time.Millisecond {
		t.Errorf("window CPU %v: want at least the exited thread's %v and at most the process's %v", got, d, all)
	}
	if w.TickUserSec+w.TickSysSec > 0 && math.Abs(w.UserSec/w.CPUSec()-w.TickUserSec/(w.TickUserSec+w.TickSysSec)) > 1e-9 {
		t.Errorf("user %v and sys %v do not split the CPU as the ticks %v and %v do", w.UserSec, w.SysSec, w.TickUserSec, w.TickSysSec)
	}
}
