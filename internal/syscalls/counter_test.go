//go:build linux

package syscalls

import (
	"io"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/gosleuth/gosleuth/internal/perf"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// runtimeNoise lists the calls the Go runtime (and the patient's own
// stdin/stdout handshake) may make on its own while the patient works:
// sysmon's sleeps, parking and waking Ms, preemption signals (getpid +
// tgkill, rt_sigreturn), heap growth and scavenging, thread creation, the
// periodic GOMAXPROCS update (sched_getaffinity, cgroup files read with
// openat/pread64/close) and the handshake's read/write.
var runtimeNoise = map[string]bool{
	"futex": true, "nanosleep": true, "getpid": true, "tgkill": true, "rt_sigreturn": true,
	"mmap": true, "munmap": true, "madvise": true, "sched_yield": true, "epoll_pwait": true,
	"read": true, "write": true, "clone": true, "clone3": true, "rt_sigprocmask": true,
	"sigaltstack": true, "gettid": true, "mprotect": true, "prctl": true, "exit": true,
	"sched_getaffinity": true, "pread64": true, "openat": true, "close": true, "lseek": true,
	"fcntl": true, "eventfd2": true,
}

// TestMain removes the patient built for the tests.
func TestMain(m *testing.M) { testbin.Main(m) }

// buildPatient builds testdata/patient once per test binary.
func buildPatient(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "./testdata/patient")
}

// patient is a running testdata/patient: it works when told "go" on its
// input and answers on its output.
type patient struct {
	*testbin.Proc
	in io.WriteCloser
}

func startPatient(t *testing.T, args ...string) *patient {
	t.Helper()
	cmd := exec.Command(buildPatient(t), args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &patient{Proc: testbin.Start(t, cmd, testbin.Options{Lines: true}), in: in}
	if p.Ready() != "ready" {
		t.Fatalf("patient said %q, want ready", p.Ready())
	}
	return p
}

// expect fails the test unless the patient's next line is word.
func (p *patient) expect(t *testing.T, word string) {
	t.Helper()
	if line := p.Next(t, 2*time.Minute); line != word {
		t.Fatalf("patient said %q, want %q", line, word)
	}
}

func needPerf(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Root, testenv.Tracefs)
}

// countPatient attaches to a patient started with args, lets it work and
// returns the counts by name.
func countPatient(t *testing.T, perThread bool, args ...string) (map[string]uint64, *Counter, []ThreadCounts) {
	t.Helper()
	needPerf(t)
	evs := testEvents(t)
	p := startPatient(t, args...)
	opts := CounterOptions{Events: evs, PerThread: perThread}
	if perThread {
		tot, err := TotalEvent()
		if err != nil {
			t.Fatal(err)
		}
		opts.Total = &tot
	}
	c := attachGo(t, p, opts)
	if perThread {
		// Follow new threads the way the CLI does.
		f := perf.NewFollower("", p.PID(), false)
		defer f.Close()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				added, _, err := f.Poll()
				if err != nil {
					return
				}
				var tids []int
				for _, a := range added {
					tids = append(tids, a.TID)
				}
				c.AddThreads(tids)
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		p.expect(t, "done")
		close(stop)
		wg.Wait()
	} else {
		p.expect(t, "done")
	}
	sum := make([]uint64, len(evs))
	total, threads, err := c.Read(sum, perThread)
	if err != nil {
		t.Fatal(err)
	}
	if c.ReadErrors > 0 {
		// A group that could not be read keeps stale counts: the exact
		// comparisons below would fail for a reason they do not name.
		t.Fatalf("%d syscall counter groups could not be read; last: %v", c.ReadErrors, c.LastReadError)
	}
	// The releaser holds every event, those of threads added later too
	if !c.rel.usable() {
		t.Errorf("no releaser: %v", c.relErr)
	} else if c.rel.held-c.rel.dropped != c.FDs() {
		t.Errorf("the releaser holds %d descriptors, the counter %d", c.rel.held-c.rel.dropped, c.FDs())
	}
	byName := map[string]uint64{}
	for i, ev := range evs {
		if sum[i] > 0 {
			byName[ev.Name] += sum[i]
		}
	}
	if perThread {
		byName["(total)"] = total
	}
	return byName, c, threads
}

// attachGo attaches a Counter with opts to p, closed when the test
// ends, and tells p to start working.
func attachGo(t *testing.T, p *patient, opts CounterOptions) *Counter {
	t.Helper()
	c, err := NewCounter(p.PID(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(p.in, "go\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// testEvents is getppid, the runtime's noise and, last, every syscall
// (raw_syscalls:sys_enter): checking the last against the sum of the others
// proves nothing else was called, without the ~11 s it takes the kernel to
// release all 360 syscall tracepoints (one RCU grace period each).
func testEvents(t *testing.T) []Event {
	t.Helper()
	all, err := SyscallEvents(HostArch)
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for _, ev := range all {
		if ev.Name == "getppid" || ev.Name == "execve" || runtimeNoise[ev.Name] {
			evs = append(evs, ev)
		}
	}
	tot, err := TotalEvent()
	if err != nil {
		t.Fatal(err)
	}
	return append(evs, tot)
}

func checkExact(t *testing.T, got map[string]uint64, want uint64) {
	t.Helper()
	if got["getppid"] != want {
		t.Errorf("getppid counted %d times, want %d", got["getppid"], want)
	}
	var listed uint64
	for name, n := range got {
		if name != "all" && name != "(total)" {
			listed += n
		}
	}
	if got["all"] != listed {
		t.Errorf("%d syscalls in all, %d in the listed ones: the patient made unexpected calls", got["all"], listed)
	}
	t.Logf("counts: %v", got)
}

func TestCounterExact(t *testing.T) {
	got, c, _ := countPatient(t, false, "-threads", "4", "-calls", "50000")
	checkExact(t, got, 200000)
	if c.Attached < 5 {
		t.Errorf("attached to %d threads, want at least 5 (main + 4 workers)", c.Attached)
	}
}

func TestCounterThreadsStartedAfterAttach(t *testing.T) {
	got, c, _ := countPatient(t, false, "-late", "-threads", "4", "-calls", "50000")
	checkExact(t, got, 200000)
	if got["clone"]+got["clone3"] == 0 {
		t.Errorf("no thread was created after attach (clone not counted): the test proves nothing")
	}
	t.Logf("attached %d threads, retries %d", c.Attached, c.Retries)
}

func TestCounterPerThread(t *testing.T) {
	got, _, threads := countPatient(t, true, "-late", "-threads", "4", "-calls", "50000")
	if got["(total)"] < 200000 {
		t.Errorf("exact total %d < 200000", got["(total)"])
	}
	// Each worker thread's own counter holds its calls; threads found
	// after they started may miss their first calls, never count twice.
	var workers int
	var sum uint64
	for _, th := range threads {
		var n uint64
		for i, ev := range testEvents(t) {
			if ev.Name == "getppid" {
				n = th.Counts[i]
			}
		}
		sum += n
		if n > 0 {
			workers++
		}
		if n > 50000 {
			t.Errorf("thread %d counted %d getppid, more than it made", th.TID, n)
		}
	}
	if sum > 200000 || workers == 0 {
		t.Errorf("per-thread getppid sum %d over %d threads", sum, workers)
	}
	t.Logf("per-thread getppid %d over %d threads; total %d", sum, workers, got["(total)"])
}

func TestCounterChildProcess(t *testing.T) {
	got, _, _ := countPatient(t, false, "-child", "-threads", "2", "-calls", "30000")
	if got["getppid"] != 90000 {
		t.Errorf("getppid %d, want 90000 (2 threads and a child, 30000 each)", got["getppid"])
	}
	if got["execve"] != 1 {
		t.Errorf("execve %d, want 1 (the child)", got["execve"])
	}
}

func TestCounterGone(t *testing.T) {
	needPerf(t)
	_, err := NewCounter(536870000, CounterOptions{Events: testEvents(t)})
	if err == nil {
		t.Fatal("no error for a missing process")
	}
}
