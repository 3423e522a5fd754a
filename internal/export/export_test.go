package export

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestGroupOf(t *testing.T) {
	all := []string{KindUnit, KindContainer, KindExe}
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		kinds        []string
		cgroup, comm string
		kind, name   string
	}{
		{all, "/system.slice/ssh.service", "sshd", KindUnit, "ssh.service"},
		{all, "/system.slice/nginx.service/worker", "nginx", KindUnit, "nginx.service"},
		{all, "/user.slice/user-1000.slice/session-2.scope", "bash", KindExe, "bash"},
		{all, "/system.slice/docker-" + id + ".scope", "app", KindContainer, "docker/0123456789ab"},
		{all, "/docker/" + id, "app", KindContainer, "container/0123456789ab"},
		{all, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/cri-containerd-" + id + ".scope", "app", KindContainer, "cri-containerd/0123456789ab"},
		{all, "/kubepods/burstable/pod1234-abcd", "pause", KindContainer, "pod/1234-abcd"},
		{all, "/", "init", KindExe, "init"},
		{all, "", "kthreadd", KindExe, "kthreadd"},
		{[]string{KindContainer, KindUnit, KindExe}, "/system.slice/docker-" + id + ".scope", "app", KindContainer, "docker/0123456789ab"},
		{[]string{KindExe}, "/system.slice/ssh.service", "sshd", KindExe, "sshd"},
		{all, "/system.slice/docker-nothex.scope", "x", KindExe, "x"},
		{all, "/libpod_parent/libpod-" + id, "app", KindContainer, "libpod/0123456789ab"},
		{all, "/libpod_parent/libpod-conmon-" + id, "conmon", KindExe, "conmon"},
		{all, "/kubepods.slice/kubepods-pod1234_abcd.slice/crio-conmon-" + id + ".scope", "conmon", KindContainer, "pod/1234-abcd"},
	}
	for _, tt := range tests {
		kind, name := groupOf(tt.kinds, tt.cgroup, tt.comm)
		if kind != tt.kind || name != tt.name {
			t.Errorf("groupOf(%v, %q, %q) = %s %q, want %s %q", tt.kinds, tt.cgroup, tt.comm, kind, name, tt.kind, tt.name)
		}
	}
}

func TestParseGroupBy(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  bool
	}{
		{"unit,container,exe", "unit,container,exe", false},
		{"container", "container,exe", false},
		{"exe", "exe", false},
		{"unit,unit", "", true},
		{"pid", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseGroupBy(tt.in)
		if (err != nil) != tt.err || strings.Join(got, ",") != tt.want {
			t.Errorf("ParseGroupBy(%q) = %v, %v", tt.in, got, err)
		}
	}
}

// tickerPatient copies the 1 ms ticker patient to a name of this test
// process's own, so that no other run of these tests on the host (whose
// patient would join its group, by executable name) disturbs it, and
// startTicker starts the ticker patient, waits until it runs and kills it
// at the end of the test; it returns the process and its group's name.
func startTicker(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	bin, name := tickerPatient(t)
	cmd := exec.Command(bin)
	testbin.Start(t, cmd, testbin.Options{})
	return cmd, name
}

// returns its path and its group's name.
func tickerPatient(t *testing.T) (path, name string) {
	t.Helper()
	b, err := os.ReadFile(testbin.Build(t, "./testdata/exportticker"))
	if err != nil {
		t.Fatal(err)
	}
	name = fmt.Sprintf("tick%d", os.Getpid())
	path = filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path, name
}

// TestLiveTickerGroup samples the real host with a 1 ms ticker patient
// running: its group's wake-ups counter rises at the ticker's pace while its
// CPU stays small, the counters do not fall back when it exits, and a
// scrape writes what the last sample holds in the exposition format.
func TestLiveTickerGroup(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	cmd, name := startTicker(t)
	e, err := New(Config{GroupBy: []string{KindExe}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	group := func() GroupStats { return groupOfExe(t, e, name) }
	sample := func() {
		t.Helper()
		if err := e.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	sample()
	g0, g1, t0, t1 := containedDeltas(t, e, cmd.Process.Pid, name, 0, nil)
	rate := (g1.Wakeups - g0.Wakeups) / t1.Sub(t0).Seconds()
	cpu := (g1.UserSec + g1.SysSec - g0.UserSec - g0.SysSec) / t1.Sub(t0).Seconds()
	t.Logf("%s: %.0f wake-ups/s, %.1f%% of a core, %d threads", name, rate, cpu*100, g1.Threads)
	// A 1 ms ticker wakes a thread at least once per tick.
	if rate < 500 || rate > 20000 {
		t.Errorf("wake-ups %.0f/s from a 1 ms ticker", rate)
	}
	if g1.Processes != 1 || g1.Threads < 2 || g1.RSSBytes == 0 || g1.GoVersions[runtime.Version()] != 1 {
		t.Errorf("group state %+v", g1)
	}

	// A scrape writes the last sample.
	ts := httptest.NewServer(e.Handler())
	defer ts.Close()
	fams := scrape(t, ts.URL+"/metrics")
	if v := value(fams, "gosleuth_group_wakeups_total", name); v != g1.Wakeups {
		t.Errorf("scraped wake-ups %v, the sample holds %v", v, g1.Wakeups)
	}
	for _, name := range []string{"gosleuth_group_cpu_seconds_total", "gosleuth_group_processes", "gosleuth_group_threads",
		"gosleuth_group_resident_memory_bytes", "gosleuth_group_open_fds", "gosleuth_group_fd_limit_ratio_max",
		"gosleuth_group_go_processes", "gosleuth_exporter_collection_seconds", "gosleuth_exporter_tasks"} {
		if fams[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}

	// The doctor's whole-host run (from /proc alone here) finds the
	// ticker, and a scrape carries the finding with the process's group.
	e.diagnose(context.Background(), DoctorConfig{Window: 2 * time.Second})
	sample()
	s, _ := e.Last()
	found := false
	for _, f := range s.Findings {
		if f.PID == cmd.Process.Pid {
			t.Logf("finding %s %s for pid %d in %s/%s", f.ID, f.Severity, f.PID, f.Kind, f.Name)
			found = found || f.ID == "idle-wakeups" && f.Kind == KindExe && f.Name == name
		}
	}
	if !found || s.DoctorRuns != 1 {
		t.Errorf("no idle-wakeups finding for the ticker in %d findings (%d doctor runs)", len(s.Findings), s.DoctorRuns)
	}
	if fams := scrape(t, ts.URL+"/metrics"); value(fams, "gosleuth_finding", name) != 1 {
		t.Errorf("no gosleuth_finding series for the ticker's group")
	}

	// The patient exits: its group keeps what it added.
	cmd.Process.Kill()
	cmd.Wait()
	sample()
	g2 := group()
	if g2.Wakeups < g1.Wakeups || g2.UserSec < g1.UserSec || g2.SysSec < g1.SysSec || g2.Involuntary < g1.Involuntary {
		t.Errorf("counters fell when the process exited: %+v then %+v", g1, g2)
	}
	if g2.Processes != 0 || g2.Threads != 0 {
		t.Errorf("after the exit: %d processes, %d threads", g2.Processes, g2.Threads)
	}
}

// groupOfExe returns the exe group name of the exporter's last sample.
func groupOfExe(t *testing.T, e *Exporter, name string) GroupStats {
	t.Helper()
	s, err := e.Last()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range s.Groups {
		if g.Kind == KindExe && g.Name == name {
			return g
		}
	}
	t.Fatalf("no group exe/%s among %d", name, len(s.Groups))
	return GroupStats{}
}

// containedDeltas takes two samples 2 s apart, each bracketed by reads of
// process pid's own counters from /proc just before and just after it,
// and checks that the group's deltas lie between the bracketing deltas
// (containment, exact: no tolerance to choose), CPU seconds within ticks
// clock ticks more either side. check, when not nil, vets each bracketed
// sample. It returns the group at both samples and their times.
func containedDeltas(t *testing.T, e *Exporter, pid int, name string, ticks float64, check func()) (g0, g1 GroupStats, t0, t1 time.Time) {
	t.Helper()
	bracket := func() (before, after procCounters) {
		t.Helper()
		before = readCounters(t, pid)
		if err := e.Sample(); err != nil {
			t.Fatal(err)
		}
		after = readCounters(t, pid)
		if check != nil {
			check()
		}
		return
	}
	b0, a0 := bracket()
	g0, t0 = groupOfExe(t, e, name), time.Now()
	time.Sleep(2 * time.Second)
	b1, a1 := bracket()
	g1, t1 = groupOfExe(t, e, name), time.Now()
	for _, c := range []struct {
		what     string
		got      float64
		min, max float64
	}{
		{"wake-ups", g1.Wakeups - g0.Wakeups, b1.vol - a0.vol, a1.vol - b0.vol},
		{"involuntary switches", g1.Involuntary - g0.Involuntary, b1.invol - a0.invol, a1.invol - b0.invol},
		{"CPU seconds", g1.UserSec + g1.SysSec - g0.UserSec - g0.SysSec, b1.cpu - a0.cpu - 1e-9 - ticks/proc.ClockTicks,
			a1.cpu - b0.cpu + 1e-9 + ticks/proc.ClockTicks},
	} {
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s: the group counted %.3f, /proc brackets it in [%.3f, %.3f]", c.what, c.got, c.min, c.max)
		}
	}
	return g0, g1, t0, t1
}

// TestLiveTickerGroupBPF: as root, with the task iterator and its idle
// back-off (the exporter's defaults), a busy process is read by TID in
// the samples between two walks of every task, and its group's counters
// stay exact there too.
func TestLiveTickerGroupBPF(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	cmd, name := startTicker(t)
	const back = 3
	e, err := New(Config{GroupBy: []string{KindExe}, BPF: true, IdleBackoff: back})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	// The first walks find every process just seen; past them, samples
	// between two walks read the processes that ran lately only. Spaced
	// as samples are (if less), so that the ticker runs between two.
	for range 2*back + 1 {
		if err := e.Sample(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if off := e.cur.Stats.TasksFromBPFOff; off != "" {
		t.Fatalf("task iterator not in use: %s", off)
	}
	// The iterator reads a process's exact run time and its tick-sampled
	// user and system time, and gosleuth splits the first in the ratio of
	// the others as the kernel does for stat (cputime.adjust), but from
	// its own last split, not the one stat's readers (here the test)
	// leave: both splits sum to the run time, so each side's ticks, each
	// truncated, differ from stat's by one at most at either reading.
	partials := 0
	g0, g1, t0, t1 := containedDeltas(t, e, cmd.Process.Pid, name, 2, func() {
		if e.cur.Stats.IterPartial {
			partials++
		}
	})
	if partials == 0 {
		t.Errorf("neither bracketed sample was a partial read")
	}
	rate := (g1.Wakeups - g0.Wakeups) / t1.Sub(t0).Seconds()
	if rate < 500 || rate > 20000 {
		t.Errorf("wake-ups %.0f/s from a 1 ms ticker", rate)
	}
}

// TestRuntimeSeries reads the Go runtime of a patient through its agent,
// and of the same patient without it through its memory (read at most every
// memoryEvery): its group gets client_golang-named runtime series under
// gosleuth_, a gauge (goroutines) at the patient's value and a counter
// (objects allocated, one per tick) that rises at its pace from a baseline
// of 0, and counts one runtime source.
func TestRuntimeSeries(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	for _, tc := range []struct {
		source        string
		env           []string
		minGoroutines float64 // the agent runs goroutines of its own
	}{
		{"agent", []string{"PATIENT_AGENT=1"}, 2},
		{"memory", nil, 1},
	} {
		t.Run(tc.source, func(t *testing.T) {
			if tc.source == "memory" {
				testenv.Require(t, testenv.AMD64)
			}
			bin, name := tickerPatient(t)
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), tc.env...)
			testbin.Start(t, cmd, testbin.Options{})
			e, err := New(Config{GroupBy: []string{KindExe}, Runtime: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.reader.Close()
			get := func(prom string) (float64, bool) {
				s, _ := e.Last()
				for _, r := range s.Runtime {
					if r.Prom == prom && r.Name == name {
						return r.Value, true
					}
				}
				return 0, false
			}
			e.Sample() // connects to the source and takes the baseline
			a0, ok := get("gosleuth_go_gc_heap_allocs_objects_total")
			if !ok {
				s, _ := e.Last()
				t.Fatalf("no allocation counter for the patient's group among %d runtime series", len(s.Runtime))
			}
			rp := e.rtProcs[procID{int32(cmd.Process.Pid), e.cur.Find(int32(cmd.Process.Pid)).StartTime}]
			if rp == nil || rp.src == nil || rp.src.Kind() != tc.source {
				t.Fatalf("the patient's runtime source: %+v, want %s", rp, tc.source)
			}
			t0 := time.Now()
			time.Sleep(time.Second)
			// The next read of a memory source is due memoryEvery after
			// the first.
			rp.lastAt = rp.lastAt.Add(-memoryEvery)
			for range runtimeEvery { // the runtime is read every runtimeEvery samples
				e.Sample()
			}
			a1, _ := get("gosleuth_go_gc_heap_allocs_objects_total")
			rate := (a1 - a0) / time.Since(t0).Seconds()
			g, _ := get("gosleuth_go_sched_goroutines_goroutines")
			t.Logf("allocations %.0f/s, goroutines %.0f", rate, g)
			// One object per 1 ms tick, plus the runtime's (and the
			// agent's) own; the memory source counts objects in the spans
			// handed to the Ps, so its count runs ahead by at most a
			// span's free slots per P.
			if a0 != 0 || rate < 500 {
				t.Errorf("allocation counter %.0f then %.0f: want a baseline of 0 and about 1,000/s", a0, a1)
			}
			if g < tc.minGoroutines || g > 50 {
				t.Errorf("goroutines %.0f", g)
			}
			s, _ := e.Last()
			for _, gr := range s.Groups {
				if gr.Name == name && gr.RuntimeSources != 1 {
					t.Errorf("runtime sources %d, want 1", gr.RuntimeSources)
				}
			}
		})
	}
}

// procCounters are a process's counters read straight from /proc.
type procCounters struct{ vol, invol, cpu float64 }

func readCounters(t *testing.T, pid int) procCounters {
	t.Helper()
	var c procCounters
	// CPU is the threads' schedstat run time, as gosleuth defines it.
	scheds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if len(scheds) == 0 {
		t.Fatalf("process %d has no threads' schedstat", pid)
	}
	for _, f := range scheds {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		ns, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
		c.cpu += ns / 1e9
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				c.vol += x
			} else if v, ok := strings.CutPrefix(l, "nonvoluntary_ctxt_switches:"); ok {
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				c.invol += x
			}
		}
	}
	return c
}

// TestPromtoolAcceptsScrape checks the exposition with Prometheus's own
// linter.
func TestPromtoolAcceptsScrape(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Prometheus)
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	e.Sample()
	time.Sleep(200 * time.Millisecond)
	e.Sample()
	ts := httptest.NewServer(e.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return fams
}

// value returns the value of family's series whose group label is group.
func value(fams map[string]*dto.MetricFamily, family, group string) float64 {
	f := fams[family]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == "group" && l.GetValue() == group {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return -1
}

// TestIdleBackoff: unscraped for IdleAfter, the exporter samples every
// IdleInterval; a scrape brings the short period back at once.
func TestIdleBackoff(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	e, err := New(Config{GroupBy: []string{KindExe}, Interval: 50 * time.Millisecond,
		IdleAfter: 200 * time.Millisecond, IdleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	samples := func() int64 {
		s, err := e.Last()
		if err != nil {
			return 0
		}
		return int64(s.Self.Samples)
	}
	// Not scraped: after 200 ms of 50 ms samples it goes idle. A sample
	// of a loaded host (3,600 tasks) takes longer than 50 ms, so the test
	// waits for the count to stop rather than counting in fixed time.
	count := func() uint64 {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.last == nil {
			return 0
		}
		return e.last.Self.Samples
	}
	idle := false
	prev := count()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		n := count()
		if n == prev && n >= 2 {
			idle = true
			break
		}
		prev = n
	}
	if !idle {
		t.Fatalf("unscraped, still sampling after 10 s (%d samples): want the 50 ms period for 200 ms, then none", count())
	}
	time.Sleep(time.Second)
	if n := count(); n != prev {
		t.Errorf("idle and unscraped, %d samples in a second: want none (the idle period is an hour)", n-prev)
	}
	// Scraped every 100 ms: the 50 ms period again, so more samples than
	// scrapes (a slow host stretches each sample, hence 1.5 s for 6).
	before := samples()
	scrapes := 0
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; scrapes++ {
		time.Sleep(100 * time.Millisecond)
		samples()
	}
	if got := samples() - before; got < 6 {
		t.Errorf("%d samples in %d scrapes 100 ms apart: want the 50 ms period back", got, scrapes)
	}
}

// TestShortLivedGroup: a process seen in one sample only counts in the
// short-lived group, whose series exist from the start; seen again, it
// gets a group of its own.
func TestShortLivedGroup(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gsshortlived")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{GroupBy: []string{KindExe}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	groups := func() map[string]GroupStats {
		t.Helper()
		if err := e.Sample(); err != nil {
			t.Fatal(err)
		}
		s, _ := e.Last()
		out := map[string]GroupStats{}
		for _, g := range s.Groups {
			out[g.Kind+"/"+g.Name] = g
		}
		return out
	}
	short := KindShort + "/" + KindShort
	if _, ok := groups()[short]; !ok {
		t.Fatalf("no short-lived group after the first sample")
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	g := groups()
	if _, ok := g["exe/gsshortlived"]; ok {
		t.Errorf("a process seen once has a group of its own")
	}
	if g[short].Processes < 1 {
		t.Errorf("the short-lived group holds %d processes, want the new one", g[short].Processes)
	}
	g = groups()
	if own, ok := g["exe/gsshortlived"]; !ok || own.Processes != 1 {
		t.Errorf("seen twice: group %+v (present %v), want 1 process", own, ok)
	}
}

// TestRuntimeConnectBackoff: a Go process without a runtime source (this
// test's own: it runs no agent, and the memory source is left out) is
// looked at again after connectRetry, then after twice as long at each
// miss, up to connectRetryMax.
func TestRuntimeConnectBackoff(t *testing.T) {
	e, err := New(Config{GroupBy: []string{KindExe}, Runtime: true, NoMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	if err := e.Sample(); err != nil {
		t.Fatal(err)
	}
	self := e.cur.Find(int32(os.Getpid()))
	if self == nil || self.GoVersion == "" {
		t.Fatalf("this test's own process, a Go binary, is not seen as one: %+v", self)
	}
	rp := e.rtProcs[procID{self.PID, self.StartTime}]
	if rp == nil || rp.src != nil || rp.tried.IsZero() {
		t.Fatalf("after the first sample: %+v, want one missed look", rp)
	}
	now, want := rp.tried, connectRetry
	for range 6 {
		if rp.wait != want {
			t.Fatalf("wait after a miss %v, want %v", rp.wait, want)
		}
		e.sampleRuntime(now.Add(want - time.Second))
		if !rp.tried.Equal(now) {
			t.Fatalf("looked again %v after a miss, before the wait of %v", rp.tried.Sub(now), want)
		}
		now = now.Add(want)
		e.sampleRuntime(now)
		if !rp.tried.Equal(now) {
			t.Fatalf("not looked again after the wait of %v", want)
		}
		want = min(2*want, connectRetryMax)
	}
}

// BenchmarkSample is one background sample of this host: /proc read, the
// groups folded, the snapshot published.
func BenchmarkSample(b *testing.B) {
	testenv.Require(b, testenv.Linux)
	e, err := New(Config{GroupBy: []string{KindExe}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.reader.Close()
	e.Sample()
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadSignal: the exporter says how it learns which threads ran: from
// the files (taskstats as root) by default, through the task iterator
// with BPF.
func TestReadSignal(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	for _, c := range []struct {
		bpf  bool
		want string
	}{{false, "taskstats"}, {true, "bpf"}} {
		e, err := New(Config{GroupBy: []string{KindExe}, BPF: c.bpf})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := e.Sample(); err != nil {
				t.Fatal(err)
			}
		}
		ts := httptest.NewServer(e.Handler())
		fams := scrape(t, ts.URL+"/metrics")
		ts.Close()
		e.reader.Close()
		var got []string
		if f := fams["gosleuth_exporter_ran_signal_info"]; f != nil {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "source" {
						got = append(got, l.GetValue())
					}
				}
			}
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("BPF %v: gosleuth_exporter_ran_signal_info sources %v, want [%s]", c.bpf, got, c.want)
		}
	}
}
