package proc

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// newIterReader returns a whole-host reader with the task iterator, failing
// the test when it could not be set up.
func newIterReader(t *testing.T) *Reader {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	r := newTestReader(t, Options{SkipKernelThreads: true, TasksFromBPF: true})
	if r.it == nil {
		t.Fatalf("task iterator not in use: %s", r.itOff)
	}
	return r
}

// taskDir lists /proc/PID/task.
func taskDir(t *testing.T, pid int) []int32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int32
	for _, e := range ents {
		n, _ := strconv.Atoi(e.Name())
		tids = append(tids, int32(n))
	}
	slices.Sort(tids)
	return tids
}

func tidsOf(s *Snapshot, p *Proc) []int32 {
	var tids []int32
	for _, t := range s.TasksOf(p) {
		tids = append(tids, t.TID)
	}
	return tids
}

// TestTasksFromBPFExact: the iterator's counters are the ones /proc shows.
// A thread that did not run between the two readers' snapshots has the
// same run time, wait time, timeslices and switch counts in both, to the
// unit; a busy process's counters, read alternately by the two readers,
// never go back.
func TestTasksFromBPFExact(t *testing.T) {
	it := newIterReader(t)
	ref := newTestReader(t, Options{SkipKernelThreads: true})
	sleeper := startHelper(t, "threads")
	waker := startHelper(t, "wake")
	var a, b, a2, b2 Snapshot
	before := listPIDs(t)
	mustSnapshot(t, it, &a)
	mustSnapshot(t, ref, &b)
	time.Sleep(100 * time.Millisecond)
	mustSnapshot(t, it, &a2)
	mustSnapshot(t, ref, &b2)
	if a2.Stats.Iterated == 0 || a2.Stats.TasksFromBPFOff != "" {
		t.Fatalf("iterator stats: %+v", a2.Stats)
	}
	after := listPIDs(t)
	// /proc is listed at the first (full) pass only; every process that
	// lived through the test is seen, those a kernel keeps from BPF
	// iterators too.
	if it.procScans != 1 || ref.procScans == 0 {
		t.Errorf("/proc listed %d times with the iterator, %d without", it.procScans, ref.procScans)
	}
	for pid := range before {
		if after[pid] && (a2.Find(pid) == nil) != (b2.Find(pid) == nil) {
			t.Errorf("process %d lived through the test: iterator reader saw it %v, /proc reader %v", pid, a2.Find(pid) != nil, b2.Find(pid) != nil)
		}
	}
	t.Logf("iterator refresh: %+v", a2.Stats)
	t.Logf("/proc refresh: %+v", b2.Stats)

	pa, pb := a2.Find(int32(sleeper.Process.Pid)), b2.Find(int32(sleeper.Process.Pid))
	if pa == nil || pb == nil {
		t.Fatalf("sleeping helper missing: iterator %v, /proc %v", pa != nil, pb != nil)
	}
	if ta, tb := tidsOf(&a2, pa), tidsOf(&b2, pb); !slices.Equal(ta, tb) || len(ta) < helperThreadCount {
		t.Errorf("sleeping helper's threads: iterator %v, /proc %v", ta, tb)
	}
	still := 0
	tb := b2.TasksOf(pb)
	for i, x := range a2.TasksOf(pa) {
		y := tb[i]
		if x.RunNS != y.RunNS {
			continue // it ran between the two snapshots
		}
		still++
		if x.Slices != y.Slices || x.WaitNS != y.WaitNS || x.VolCtxsw != y.VolCtxsw || x.InvolCtxsw != y.InvolCtxsw {
			t.Errorf("thread %d did not run, yet iterator %+v, /proc %+v", x.TID, x, y)
		}
	}
	t.Logf("%d of the sleeping helper's %d threads did not run between the snapshots", still, len(tb))
	if still < helperThreadCount {
		t.Errorf("%d threads kept still between the snapshots, want at least the %d blocked ones", still, helperThreadCount)
	}

	// The waker runs 500 times a second: its summed switch counts, read in
	// turn by each reader, only grow.
	var vols []uint64
	for _, s := range []*Snapshot{&a, &b, &a2, &b2} {
		p := s.Find(int32(waker.Process.Pid))
		if p == nil || p.Known&KnownCtxsw == 0 {
			t.Fatalf("waker missing or without switch counts: %+v", p)
		}
		vols = append(vols, p.VolCtxsw)
	}
	if !slices.IsSorted(vols) || vols[3]-vols[0] < 20 {
		t.Errorf("waker's voluntary switches, iterator and /proc in turn: %v", vols)
	}
}

// TestTasksFromBPFChanges: with no /proc listing, the iterator finds a new
// process, a process's new thread and an exit.
func TestTasksFromBPFChanges(t *testing.T) {
	r := newIterReader(t)
	grow := startHelper(t, "grow")
	var s Snapshot
	mustSnapshot(t, r, &s)
	mustSnapshot(t, r, &s)

	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	// One more thread: a goroutine locked to its thread may take an idle
	// one the runtime kept, so ask until the count grows.
	before := len(taskDir(t, grow.Process.Pid))
	deadline := time.Now().Add(10 * time.Second)
	for len(taskDir(t, grow.Process.Pid)) == before && time.Now().Before(deadline) {
		wakeHelper(t, grow.Process.Pid)
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if len(taskDir(t, grow.Process.Pid)) > before {
				break
			}
		}
	}
	// The new process's comm is set once it has exec'd sleep.
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(sleep.Process.Pid) + "/comm"); string(b) == "sleep\n" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustSnapshot(t, r, &s)
	if r.procScans != 1 || s.Stats.Listed == 0 {
		t.Errorf("/proc listed %d times, %d new PIDs from the iterator", r.procScans, s.Stats.Listed)
	}
	p := s.Find(int32(sleep.Process.Pid))
	if p == nil || p.Comm != "sleep" {
		t.Fatalf("new process %d: %+v", sleep.Process.Pid, p)
	}
	if want, got := taskDir(t, grow.Process.Pid), tidsOf(&s, s.Find(int32(grow.Process.Pid))); !slices.Equal(want, got) || len(got) <= before {
		t.Errorf("growing helper: threads %v, /proc lists %v (had %d)", got, want, before)
	}

	sleep.Process.Kill()
	sleep.Wait()
	mustSnapshot(t, r, &s)
	if p := s.Find(int32(sleep.Process.Pid)); p != nil {
		t.Errorf("exited process still there: %+v", p)
	}
}

// TestTasksFromBPFOff: where the iterator cannot serve (a fixture tree for
// /proc), the reader says why and reads as without it.
func TestTasksFromBPFOff(t *testing.T) {
	r := newTestReader(t, Options{Root: "testdata/proc", TasksFromBPF: true})
	var s Snapshot
	mustSnapshot(t, r, &s)
	if s.Stats.TasksFromBPFOff == "" || len(s.Procs) == 0 {
		t.Errorf("fixture tree: %d processes, off: %q", len(s.Procs), s.Stats.TasksFromBPFOff)
	}
}

// BenchmarkIterAll reads every thread of the host through the task
// iterator, to set against BenchmarkSchedstatAll (a schedstat pread per
// thread) and BenchmarkTaskstatsAll.
func BenchmarkIterAll(b *testing.B) {
	testenv.Require(b, testenv.Linux, testenv.Root, testenv.BPF)
	it, err := newTaskIter(false, true)
	if err != nil {
		b.Fatal(err)
	}
	defer it.close()
	reads := 0
	b.ReportAllocs()
	for b.Loop() {
		if err := it.read(&reads); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(it.recs)), "ns/thread")
	b.ReportMetric(float64(len(it.recs)), "threads")
}

// statFieldsOf parses /proc/PID/stat.
func statFieldsOf(t *testing.T, pid int) statFields {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	var sf statFields
	if err := parseStat(b, &sf); err != nil {
		t.Fatal(err)
	}
	return sf
}

// TestTasksFromBPFFirstSight: with DeferNew, a process first seen after
// the first refresh is built from its leader's record alone, with the
// figures its stat shows (start time to the tick, so it is not taken for a
// reused PID when read in full; state letters for a sleeping, a stopped
// and a zombie process), and without CPU times until it is seen again.
func TestTasksFromBPFFirstSight(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	r := newTestReader(t, Options{SkipKernelThreads: true, TasksFromBPF: true, DeferNew: true})
	if r.it == nil || !r.it.leaders {
		off := r.itOff
		if r.it != nil {
			off = r.it.leadersOff
		}
		t.Fatalf("task iterator without leaders' records: %s", off)
	}
	var s Snapshot
	mustSnapshot(t, r, &s)
	mustSnapshot(t, r, &s)

	start := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(name, args...)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	sleeping := start("sleep", "30")
	stopped := start("sleep", "30")
	zombie := start("true") // not waited for until cleanup
	grow := startHelper(t, "grow")
	wakeHelper(t, grow.Process.Pid)
	stopped.Process.Signal(syscall.SIGSTOP)
	want := map[int]byte{sleeping.Process.Pid: 'S', stopped.Process.Pid: 'T', zombie.Process.Pid: 'Z'}
	deadline := time.Now().Add(5 * time.Second)
	for pid, st := range want {
		for statFieldsOf(t, pid).State != st && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(50 * time.Millisecond) // the helper's new thread starts
	// Each process's stat is read just before and just after the
	// snapshot: the Go helper's RSS and state may move between them.
	pids := []int{sleeping.Process.Pid, stopped.Process.Pid, zombie.Process.Pid, grow.Process.Pid}
	before := map[int]statFields{}
	for _, pid := range pids {
		before[pid] = statFieldsOf(t, pid)
	}
	mustSnapshot(t, r, &s)
	for _, pid := range pids {
		p := s.Find(int32(pid))
		if p == nil {
			t.Fatalf("process %d not seen", pid)
		}
		sf, sb := statFieldsOf(t, pid), before[pid]
		page := uint64(os.Getpagesize())
		rssOK := p.RSSBytes >= min(sb.RSSPages, sf.RSSPages)*page && p.RSSBytes <= max(sb.RSSPages, sf.RSSPages)*page
		if p.Known&KnownTimes != 0 || p.Comm != string(sf.Comm) || (p.State != sf.State && p.State != sb.State) ||
			p.PPID != int32(sf.PPID) || p.StartTime != sf.StartTime || p.Threads != int32(sf.Threads) || !rssOK ||
			p.UID != uint32(os.Geteuid()) {
			t.Errorf("first sight of %d from the iterator: %+v; its stat: %s %c ppid %d start %d threads %d rss %d pages (%d before)",
				pid, *p, sf.Comm, sf.State, sf.PPID, sf.StartTime, sf.Threads, sf.RSSPages, sb.RSSPages)
		}
		if want[pid] != 0 && p.State != want[pid] {
			t.Errorf("process %d: state %c, want %c", pid, p.State, want[pid])
		}
	}
	if p := s.Find(int32(grow.Process.Pid)); p == nil || p.Threads < 2 {
		t.Errorf("growing helper at first sight: %+v", p)
	}
	// Seen again: read in full, the same process (not a reused PID).
	mustSnapshot(t, r, &s)
	for _, pid := range []int{sleeping.Process.Pid, grow.Process.Pid} {
		p := s.Find(int32(pid))
		if p == nil || p.Known&KnownTimes == 0 || p.Known&KnownCtxsw == 0 || len(s.TasksOf(p)) == 0 {
			t.Errorf("process %d seen again: %+v", pid, p)
		}
	}
}

// TestTasksFromBPFUnprivileged: as a user without CAP_BPF the reader says
// why it reads files, and reads them.
func TestTasksFromBPFUnprivileged(t *testing.T) {
	if os.Getenv("GOSLEUTH_PROC_NOBODY") == "" {
		testenv.Require(t, testenv.Linux, testenv.Nobody)
		// A copy of this test binary that user nobody can run.
		dir, err := os.MkdirTemp("", "gosleuth-proc-nobody")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		b, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		bin := dir + "/proc.test"
		if err := os.WriteFile(bin, b, 0o755); err != nil || os.Chmod(dir, 0o755) != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestTasksFromBPFUnprivileged$", "-test.v")
		cmd.Dir = "/"
		cmd.Env = append(os.Environ(), "GOSLEUTH_PROC_NOBODY=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		t.Logf("as nobody: %s", out)
		return
	}
	r := newTestReader(t, Options{SkipKernelThreads: true, TasksFromBPF: true, DeferNew: true})
	var s Snapshot
	mustSnapshot(t, r, &s)
	mustSnapshot(t, r, &s)
	if r.it != nil || !strings.Contains(s.Stats.TasksFromBPFOff, "CAP_BPF") || s.Find(int32(os.Getpid())) == nil || r.procScans == 0 {
		t.Errorf("as uid %d: iterator %v, off %q, %d processes", os.Getuid(), r.it != nil, s.Stats.TasksFromBPFOff, len(s.Procs))
	}
	t.Logf("off: %s", s.Stats.TasksFromBPFOff)
}
