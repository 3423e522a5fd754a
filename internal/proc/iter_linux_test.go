package proc

import (
	"cmp"
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

// TestTasksFromBPFStat: the figures a process's stat and io show, and a
// thread's stat, come from the iterator's records as /proc shows them.
// Every process and thread that did not run between a files reader's
// reading and the iterator reader's first has the same CPU times (split
// between user and system as stat splits them), faults, children's times,
// syscall counts, RSS, fd limit, thread count, state, parent and name in
// both.
func TestTasksFromBPFStat(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	threadsHelper := startHelper(t, "threads")
	startHelper(t, "wake")
	burnt := int32(startHelper(t, "burnt").Process.Pid)
	// The burnt helper's runtime wakes now and then (the scavenger, a
	// GC): readings are taken again, by new readers, until it kept
	// still between two of them.
	var a, b Snapshot
	burntThreads := 0
	self := int32(os.Getpid())
	for attempt := 1; attempt <= 10 && burntThreads < 3; attempt++ {
		ref := newTestReader(t, Options{SkipKernelThreads: true})
		mustSnapshot(t, ref, &a)
		it := newIterReader(t)
		mustSnapshot(t, it, &b)
		if !it.it.io {
			t.Fatalf("records without io counts: the kernel lacks CONFIG_TASK_XACCT?")
		}
		procs, threads, multi := 0, 0, 0
		burntThreads = 0
		for i := range b.Procs {
			x := &b.Procs[i]
			y := a.Find(x.PID)
			if y == nil || y.StartTime != x.StartTime || y.RunNS != x.RunNS || x.Known&y.Known&KnownCtxsw == 0 {
				continue // new, or it ran between the readings
			}
			if x.PID == self || x.State == 'R' || y.State == 'R' {
				// The kernel adds a running thread's time to the run
				// time schedstat shows only when it stops or at a
				// tick, so an equal RunNS does not prove that a
				// thread on a CPU kept still. The test itself ran
				// between the readings (it took them): its faults
				// moved with an equal RunNS.
				continue
			}
			procs++
			if x.UTime != y.UTime || x.STime != y.STime || x.CUTime != y.CUTime || x.CSTime != y.CSTime ||
				x.MinFlt != y.MinFlt || x.MajFlt != y.MajFlt || x.RSSBytes != y.RSSBytes || x.Threads != y.Threads ||
				x.State != y.State || x.PPID != y.PPID || x.Comm != y.Comm || x.FDLimit != y.FDLimit ||
				x.Known&KnownIO != y.Known&KnownIO || x.SyscR != y.SyscR || x.SyscW != y.SyscW {
				t.Errorf("process %d did not run, yet\niterator %+v\n/proc    %+v", x.PID, *x, *y)
			}
			tx, ty := b.TasksOf(x), a.TasksOf(y)
			if len(tx) != len(ty) || len(tx) < 2 {
				continue // a single thread is given its process's stat by the files reader
			}
			multi++
			for k := range tx {
				u, v := &tx[k], &ty[k]
				if u.TID != v.TID || u.RunNS != v.RunNS || u.State == 'R' || v.State == 'R' {
					continue
				}
				threads++
				if x.PID == burnt && u.UTime > 0 && u.STime > 0 {
					burntThreads++
				}
				if u.UTime != v.UTime || u.STime != v.STime || u.State != v.State || u.Comm != v.Comm || u.Processor != v.Processor {
					t.Errorf("thread %d of %d did not run, yet\niterator %+v\n/proc    %+v", u.TID, x.PID, *u, *v)
				}
			}
		}
		t.Logf("reading %d: %d processes (%d multi-threaded, %d of their threads) kept still and were compared, %d of the burnt helper's threads",
			attempt, procs, multi, threads, burntThreads)
		if procs < 2 || threads < helperThreadCount {
			t.Errorf("only %d processes and %d threads kept still: nothing to compare", procs, threads)
		}
	}
	// The burnt helper's split was compared: its threads spent both
	// user and system time.
	if p := b.Find(burnt); p == nil || p.UTime < 5 || p.STime < 5 || burntThreads < 3 {
		t.Errorf("burnt helper: %+v, %d of its threads with both times compared", p, burntThreads)
	}
	// The threads helper lowered its soft fd limit to 777; limits are
	// never read from files with the iterator.
	if p := b.Find(int32(threadsHelper.Process.Pid)); p == nil || p.FDLimit != 777 || p.Known&KnownFDLimit == 0 {
		t.Errorf("threads helper's fd limit from the iterator: %+v", p)
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
	it, err := newTaskIter(false)
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
// and a zombie process; CPU times and faults).
func TestTasksFromBPFFirstSight(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	r := newTestReader(t, Options{SkipKernelThreads: true, TasksFromBPF: true, DeferNew: true})
	if r.it == nil {
		t.Fatalf("task iterator not in use: %s", r.itOff)
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
		// The times' split starts from the kernel's last one, which the
		// read before the snapshot made: neither part is below it. The
		// sum is at most the read after's, plus a tick: each part is
		// truncated to ticks on its own.
		timesOK := p.UTime >= sb.UTime && p.STime >= sb.STime && p.UTime+p.STime <= sf.UTime+sf.STime+1 &&
			p.MinFlt >= sb.MinFlt && p.MinFlt <= sf.MinFlt
		if !timesOK || p.Comm != string(sf.Comm) || (p.State != sf.State && p.State != sb.State) ||
			p.PPID != int32(sf.PPID) || p.StartTime != sf.StartTime || p.Threads != int32(sf.Threads) || !rssOK ||
			p.UID != uint32(os.Geteuid()) {
			t.Errorf("first sight of %d from the iterator: %+v; its stat: %s %c ppid %d start %d threads %d rss %d pages (%d before), utime %d stime %d minflt %d (%d %d %d before)",
				pid, *p, sf.Comm, sf.State, sf.PPID, sf.StartTime, sf.Threads, sf.RSSPages, sb.RSSPages,
				sf.UTime, sf.STime, sf.MinFlt, sb.UTime, sb.STime, sb.MinFlt)
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
		if p == nil || p.Known&KnownExe == 0 || p.Known&KnownCtxsw == 0 || len(s.TasksOf(p)) == 0 {
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

// TestCputimeAdjust: run time is split in the ratio of the sampled times,
// and neither part ever goes back.
func TestCputimeAdjust(t *testing.T) {
	for _, c := range []struct {
		name                string
		prev                cputime
		rtime, utime, stime uint64
		want                cputime
	}{
		{"no ticks yet: all user", cputime{}, 1000, 0, 0, cputime{1000, 0}},
		{"user ticks only", cputime{}, 1000, 40, 0, cputime{1000, 0}},
		{"system ticks only", cputime{}, 1000, 0, 40, cputime{0, 1000}},
		{"in the ticks' ratio", cputime{}, 1000, 30, 10, cputime{750, 250}},
		{"no new run time", cputime{600, 300}, 900, 10, 30, cputime{600, 300}},
		{"run time behind the last split", cputime{600, 300}, 800, 10, 30, cputime{600, 300}},
		// The ratio would put system time at 100, below the last 300:
		// it stays, and user time takes the rest.
		{"system time never goes back", cputime{100, 300}, 1000, 90, 10, cputime{700, 300}},
		// The ratio would put user time at 100, below the last 600.
		{"user time never goes back", cputime{600, 100}, 1000, 10, 90, cputime{600, 400}},
		{"a product beyond 64 bits", cputime{}, 1 << 62, 1 << 40, 1 << 40, cputime{1 << 61, 1 << 61}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prev := c.prev
			got := prev.adjust(c.rtime, c.utime, c.stime)
			if got != c.want || prev != c.want {
				t.Errorf("adjust(%d, %d, %d) from %v = %v (prev now %v), want %v", c.rtime, c.utime, c.stime, c.prev, got, prev, c.want)
			}
		})
	}
}

// TestTasksFromBPFPartial: with IdleBackoff, the iterator walks every task
// once in IdleBackoff refreshes and in between reads only the processes
// that ran lately and the new ones. A busy process's counters move at
// every refresh; a process started between two walks is there at the
// next refresh; a sleeping one that runs again is seen within IdleBackoff
// refreshes with its switch counts exact; an active one that exits is
// gone at the next refresh.
func TestTasksFromBPFPartial(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	for _, tc := range []struct {
		name  string
		links bool // the known processes read through links, not by TID
	}{{"by TID", false}, {"by process links", true}} {
		t.Run(tc.name, func(t *testing.T) { testPartial(t, tc.links) })
	}
}

func testPartial(t *testing.T, links bool) {
	const back = 3
	r := newTestReader(t, Options{SkipKernelThreads: true, TasksFromBPF: true, IdleBackoff: back, NewPIDsOnly: true})
	if r.it == nil || !r.seekScan {
		t.Fatalf("task iterator (%q) or a seekable /proc (%v) not in use", r.itOff, r.seekScan)
	}
	if r.it.tids == nil {
		t.Fatalf("TID reader not loaded: %s", r.it.tidOff)
	}
	if links {
		r.it.tids.close()
		r.it.tids = nil
	}
	busy := startHelper(t, "wake")
	still := startHelper(t, "threads")
	busyPID, stillPID := int32(busy.Process.Pid), int32(still.Process.Pid)
	var s Snapshot
	partials, left := 0, 0
	var run uint64
	for range 4 * back {
		mustSnapshot(t, r, &s)
		p := s.Find(busyPID)
		if p == nil {
			t.Fatalf("busy helper %d missing", busyPID)
		}
		if s.Stats.IterPartial {
			partials++
			if p.RunNS <= run {
				t.Errorf("busy helper's run time %d in a partial read, %d before", p.RunNS, run)
			}
			// (still counts this read too.)
			if sl := r.slots[stillPID]; sl != nil && sl.askGen == r.gen && sl.still > back {
				t.Errorf("a partial read asked for the sleeping helper, still for %d reads before", sl.still-1)
			} else if sl != nil && sl.askGen != r.gen {
				left++
			}
		}
		run = p.RunNS
		time.Sleep(20 * time.Millisecond)
	}
	if partials == 0 || left == 0 {
		t.Fatalf("%d partial reads in %d refreshes, %d of them without the sleeping helper", partials, 4*back, left)
	}

	// A new process, started just after a full walk.
	for r.refresh%back != 1 {
		mustSnapshot(t, r, &s)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(sleep.Process.Pid) + "/comm"); string(b) == "sleep\n" {
			break
		}
	}
	mustSnapshot(t, r, &s)
	if p := s.Find(int32(sleep.Process.Pid)); p == nil || p.Comm != "sleep" {
		t.Errorf("process started between two walks: %+v (partial read: %v)", p, s.Stats.IterPartial)
	}

	// The sleeping helper runs once: seen within back refreshes, exact.
	before := s.Find(stillPID).VolCtxsw
	wakeHelper(t, int(stillPID))
	time.Sleep(50 * time.Millisecond)
	var want uint64
	for _, tid := range taskDir(t, int(stillPID)) {
		want += uint64(statusField(t, stillPID, tid, "voluntary_ctxt_switches:"))
	}
	got := before
	for i := 0; i < back && got == before; i++ {
		mustSnapshot(t, r, &s)
		got = s.Find(stillPID).VolCtxsw
	}
	if got != want || got == before {
		t.Errorf("sleeping helper woken: %d voluntary switches within %d refreshes, /proc shows %d (%d before)", got, back, want, before)
	}

	// The busy helper exits: gone at the next refresh, partial or not.
	busy.Process.Kill()
	busy.Wait()
	mustSnapshot(t, r, &s)
	if p := s.Find(busyPID); p != nil {
		t.Errorf("exited busy helper still there (partial read: %v)", s.Stats.IterPartial)
	}
}

// statusField reads a number field of a thread's status.
func statusField(t *testing.T, pid, tid int32, field string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/task/" + strconv.Itoa(int(tid)) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no %s in the status of %d/%d", field, pid, tid)
	return 0
}

// TestTIDReader: the TID reader's records of a sleeping process's threads
// are the iterator's, to the byte: every thread that did not run between
// the two reads (its 8 threads blocked in read(2) at least; the Go
// runtime's own may run), and the leader's extension when none ran. A
// thread that ran has counters no lower than the iterator's. A TID that
// names no task has none.
func TestTIDReader(t *testing.T) {
	r := newIterReader(t)
	if r.it.tids == nil {
		t.Fatalf("TID reader not loaded: %s", r.it.tidOff)
	}
	sleeper := startHelper(t, "threads")
	tids := taskDir(t, sleeper.Process.Pid)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ask := append(slices.Clone(tids), int32(gone.Process.Pid))
	reads := 0
	if err := r.it.read(&reads); err != nil {
		t.Fatal(err)
	}
	var want []iterRec
	var wantExt iterLeader
	for _, tid := range tids {
		rec := r.it.find(tid)
		if rec == nil {
			t.Fatalf("iterator: no record of thread %d", tid)
		}
		c := *rec
		if c.leader != nil {
			wantExt, c.leader = *c.leader, nil
		}
		want = append(want, c)
	}
	if err := r.it.readPartial(ask, nil, &reads); err != nil {
		t.Fatal(err)
	}
	if len(r.it.recs) != len(tids) {
		t.Fatalf("%d records for %d live threads and an exited one", len(r.it.recs), len(tids))
	}
	same, ran := 0, false
	var ext *iterLeader
	for i, tid := range tids {
		rec := r.it.find(tid)
		if rec == nil {
			t.Fatalf("TID reader: no record of thread %d", tid)
		}
		c := *rec
		ext, c.leader = cmp.Or(c.leader, ext), nil
		w := want[i]
		if c.run != w.run {
			ran = true
			if c.run < w.run || c.slices < w.slices || c.nvcsw < w.nvcsw || c.nivcsw < w.nivcsw {
				t.Errorf("thread %d went back: %+v, the iterator's %+v", tid, c, w)
			}
			continue
		}
		same++
		if c != w {
			t.Errorf("thread %d: %+v, the iterator's %+v", tid, c, w)
		}
	}
	if same < helperThreadCount {
		t.Errorf("%d of %d threads compared, want the %d blocked in read(2) at least", same, len(tids), helperThreadCount)
	}
	if ext == nil {
		t.Fatal("TID reader: no leader's extension")
	}
	if !ran && *ext != wantExt {
		t.Errorf("leader's extension: %+v, the iterator's %+v", *ext, wantExt)
	}
}

// TestIterLinkExitedPID checks what readPartial relies on to keep the
// iterator after a link error turns it off for good: the kernel looks a
// per-process link's PID up when the link is read, not when it is made, so
// a process that exited before its link was made, or after, gives no
// records and no error.
func TestIterLinkExitedPID(t *testing.T) {
	r := newIterReader(t)
	live := startHelper(t, "threads")
	liveTIDs := taskDir(t, live.Process.Pid)
	before := exec.Command("true")
	if err := before.Run(); err != nil {
		t.Fatal(err)
	}
	after := exec.Command("sleep", "60")
	if err := after.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { after.Process.Kill(); after.Wait() })
	pids := []int32{int32(live.Process.Pid), int32(before.Process.Pid), int32(after.Process.Pid)}
	reads := 0
	if err := r.it.readPartial(nil, pids, &reads); err != nil {
		t.Fatalf("links for a live process, a reaped one and one about to exit: %v", err)
	}
	if r.it.find(int32(after.Process.Pid)) == nil {
		t.Fatalf("no record of process %d while it ran", after.Process.Pid)
	}
	after.Process.Kill()
	after.Wait()
	// The links are kept from the last read: the third one's process is
	// now reaped.
	if len(r.it.pidLinks) != len(pids) {
		t.Fatalf("%d links kept, want %d", len(r.it.pidLinks), len(pids))
	}
	if err := r.it.readPartial(nil, pids, &reads); err != nil {
		t.Fatalf("reading the links again after a process exited: %v", err)
	}
	if len(r.it.recs) != len(liveTIDs) {
		t.Errorf("%d records, want the live process's %d threads alone", len(r.it.recs), len(liveTIDs))
	}
	for _, pid := range pids[1:] {
		if r.it.find(pid) != nil {
			t.Errorf("a record of exited process %d", pid)
		}
	}
}
