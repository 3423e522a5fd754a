//go:build linux

package stacks

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/google/pprof/profile"
	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
)

var patients = struct {
	sync.Mutex
	dir   string
	built map[string]string
}{built: map[string]string{}}

func TestMain(m *testing.M) {
	code := m.Run()
	if patients.dir != "" {
		os.RemoveAll(patients.dir)
	}
	os.Exit(code)
}

// buildPatient builds testdata/NAME with extra go build flags, once per
// test run.
func buildPatient(t *testing.T, name string, flags ...string) string {
	t.Helper()
	patients.Lock()
	defer patients.Unlock()
	key := name + " " + strings.Join(flags, " ")
	if bin, ok := patients.built[key]; ok {
		return bin
	}
	if patients.dir == "" {
		dir, err := os.MkdirTemp("", "stacks-patients")
		if err != nil {
			t.Fatal(err)
		}
		patients.dir = dir
	}
	bin := filepath.Join(patients.dir, fmt.Sprintf("%s-%d", name, len(patients.built)))
	args := append([]string{"build", "-o", bin}, flags...)
	args = append(args, "./testdata/"+name)
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	patients.built[key] = bin
	return bin
}

func startPatient(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// threadStates describes each thread of process pid: its state letter and
// the kernel function it waits in, for a failure message. The listing is
// proc.FS.TaskIDs', which names an exited leader not yet reaped as gone.
func threadStates(pid int) string {
	fs := proc.NewFS("")
	tids, err := fs.TaskIDs(pid)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, tid := range tids {
		task := strconv.Itoa(tid)
		stat, _ := os.ReadFile(fs.PID(pid, "task", task, "stat"))
		wchan, _ := os.ReadFile(fs.PID(pid, "task", task, "wchan"))
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		out = append(out, fmt.Sprintf("%d %s in %q", tid, state, wchan))
	}
	return fmt.Sprintf("threads of %d: %s", pid, strings.Join(out, ", "))
}

func needPerf(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Perf)
}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Root)
}

// sampleFor profiles pid for d and symbolizes the result.
func sampleFor(t *testing.T, pid int, d time.Duration, opts Options) *Profile {
	t.Helper()
	opts.PID, opts.Duration = pid, d
	raw, err := Sample(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Samples == 0 {
		t.Fatalf("no samples in %s", d)
	}
	return Symbolize(raw)
}

func TestSha256TopFrames(t *testing.T) {
	needPerf(t)
	bin := buildPatient(t, "sha256")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, 2*time.Second, Options{})
	s := p.Summarize(5)
	var user []TopFunc
	for _, f := range s.Top {
		if !strings.HasPrefix(f.Function, "[") && !isKernelFunc(p, f.Function) {
			user = append(user, f)
		}
	}
	if len(user) == 0 || !strings.Contains(user[0].Function, "sha256") {
		t.Fatalf("top user frames %v: want a crypto/sha256 function first", user)
	}
	var shaShare float64
	for _, f := range s.Top {
		if strings.Contains(f.Function, "sha256") {
			shaShare += f.FlatShare
		}
	}
	if shaShare < 0.5 {
		t.Errorf("sha256 functions have %.0f%% of flat samples, want most: %v", 100*shaShare, s.Top)
	}
	if s.GoFramesUnresolved != 0 {
		t.Errorf("%d of %d Go frames unresolved", s.GoFramesUnresolved, s.GoFrames)
	}
	// /proc counts in 10 ms ticks: with few samples (a loaded machine)
	// the ratio is coarse.
	if lo, hi := coverageBounds(s.Samples); s.Coverage != nil && (*s.Coverage < lo || *s.Coverage > hi) {
		t.Errorf("coverage %.2f of /proc utime+stime over %d samples, want %.2f-%.2f", *s.Coverage, s.Samples, lo, hi)
	}
}

func isKernelFunc(p *Profile, name string) bool {
	for _, st := range p.Stacks {
		for _, f := range st.Frames {
			if f.Func == name {
				return f.Kernel
			}
		}
	}
	return false
}

// TestGetppidKernelShare: a getppid loop spends most of its time in the
// kernel, and the kernel frames name the syscall. The stripped build gives
// the same Go function names.
func TestGetppidKernelShare(t *testing.T) {
	needPerf(t)
	needRoot(t)
	names := map[string]map[string]bool{}
	for _, build := range []struct {
		name  string
		flags []string
	}{
		{"plain", nil},
		{"stripped", []string{"-ldflags=-s -w"}},
		{"stripped-pie", []string{"-ldflags=-s -w", "-buildmode=pie"}},
	} {
		t.Run(build.name, func(t *testing.T) {
			bin := buildPatient(t, "getppid", build.flags...)
			cmd := startPatient(t, bin)
			p := sampleFor(t, cmd.Process.Pid, 1500*time.Millisecond, Options{})
			s := p.Summarize(10)
			if s.KernelShare < 0.5 {
				t.Errorf("kernel share %.2f, want >= 0.5", s.KernelShare)
			}
			if s.Classes["syscall getppid"] < 0.4 {
				t.Errorf("class syscall getppid %.2f, want most samples: %v", s.Classes["syscall getppid"], s.Classes)
			}
			user := map[string]bool{}
			var sysFrame bool
			for _, st := range p.Stacks {
				for _, f := range st.Frames {
					// The entry of a call without arguments is an alias of its
					// body: __x64_sys_getppid in /proc/kallsyms,
					// __do_sys_getppid by the kernel's own lookup.
					if f.Kernel && syscallFunc(f.Func) == "getppid" {
						sysFrame = true
					}
					if !f.Kernel && st.Count > 0 {
						user[f.Func] = true
					}
				}
			}
			if !sysFrame {
				t.Error("no kernel frame of getppid (__x64_sys_getppid or its alias __do_sys_getppid)")
			}
			for _, want := range []string{"main.main", "syscall.Getppid", "syscall.rawSyscallNoError"} {
				if !user[want] {
					t.Errorf("no %s frame", want)
				}
			}
			if s.GoFramesUnresolved != 0 {
				t.Errorf("%d of %d Go frames unresolved", s.GoFramesUnresolved, s.GoFrames)
			}
			names[build.name] = user
		})
	}
	for _, name := range []string{"stripped", "stripped-pie"} {
		for f := range names["plain"] {
			if (strings.HasPrefix(f, "main.") || strings.HasPrefix(f, "syscall.")) && names[name] != nil && !names[name][f] {
				t.Errorf("%s build lacks %s", name, f)
			}
		}
	}
}

func TestGCClasses(t *testing.T) {
	needPerf(t)
	bin := buildPatient(t, "gcheavy")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, 2*time.Second, Options{})
	s := p.Summarize(10)
	if s.Classes[string(ClassGCMark)] < 0.05 {
		t.Errorf("gc background marking %.3f, want >= 0.05: %v", s.Classes[string(ClassGCMark)], s.Classes)
	}
	if s.Classes[string(ClassGCAssist)] <= 0 {
		t.Errorf("no gc mark assist samples: %v", s.Classes)
	}
}

// TestPprofOutput writes the profile and reads it back with the pprof
// library and with go tool pprof.
func TestPprofOutput(t *testing.T) {
	needPerf(t)
	bin := buildPatient(t, "getppid")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, time.Second, Options{})
	var buf bytes.Buffer
	if err := p.WritePprof(&buf); err != nil {
		t.Fatal(err)
	}
	pp, err := profile.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parse our profile: %v", err)
	}
	if len(pp.SampleType) != 2 || pp.SampleType[0].Type != "samples" || pp.SampleType[1].Unit != "nanoseconds" {
		t.Errorf("sample types %v", pp.SampleType)
	}
	if len(pp.Mapping) == 0 || pp.Mapping[0].File != bin {
		t.Errorf("first mapping %v, want the executable %s", pp.Mapping, bin)
	}
	var tid, mode bool
	for _, s := range pp.Sample {
		tid = tid || len(s.NumLabel["tid"]) == 1
		mode = mode || len(s.Label["mode"]) == 1
	}
	if !tid || !mode {
		t.Errorf("labels: tid %v mode %v", tid, mode)
	}
	file := filepath.Join(t.TempDir(), "p.pb.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", file).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("main.main")) {
		t.Errorf("go tool pprof -top: %v\n%s", err, out)
	}
}

// TestSymbolsAgreeWithGosym checks the pclntab reader names every function
// as debug/gosym does, on plain, stripped, PIE and cgo builds.
func TestSymbolsAgreeWithGosym(t *testing.T) {
	t.Parallel()
	builds := []struct {
		name  string
		flags []string
		cgo   bool
	}{
		{"plain", nil, false},
		{"stripped", []string{"-ldflags=-s -w"}, false},
		{"stripped-pie", []string{"-ldflags=-s -w", "-buildmode=pie"}, false},
		{"cgo", []string{"-ldflags=-linkmode=external"}, true},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			if b.cgo {
				testenv.Require(t, testenv.GCC)
			}
			bin := buildPatient(t, "getppid", b.flags...)
			o, n, bad, inlined := compareWithGosym(t, bin, 1, 13)
			if bad > 0 || n < 1000 || inlined == 0 || o.gt.gofunc == 0 {
				t.Errorf("%d of %d PCs disagree; %d with inlined frames", bad, n, inlined)
			}
		})
	}
}

// TestMatchesGoProfile samples a patient that profiles itself with Go's
// CPU profiler over the same window, and compares the user leaf frames
// (innermost, inlined included) and leaf+caller pairs of both profiles.
func TestMatchesGoProfile(t *testing.T) {
	needPerf(t)
	bin := buildPatient(t, "mixed")
	goProf := filepath.Join(t.TempDir(), "go.pprof")
	cmd := startPatient(t, bin, "4s", goProf)
	raw, err := Sample(context.Background(), Options{PID: cmd.Process.Pid, Duration: 20 * time.Second,
		Started: func() { os.WriteFile(goProf+".go", nil, 0o644) }})
	if err != nil {
		t.Fatal(err)
	}
	if !raw.Exited {
		// Say what the patient was doing, so a failure here tells a
		// patient that hung from an exit the sampler missed.
		info, _ := os.Stat(goProf)
		t.Fatalf("the patient did not exit: sampling ran to its timeout; its profile %v; %s", info != nil && info.Size() > 0, threadStates(cmd.Process.Pid))
	}
	ours := Symbolize(raw)
	f, err := os.Open(goProf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	theirs, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	// Ours as is, and without each of the two repairs, to show what they
	// are worth: the caller recovered from the stack, the inlined frames.
	type variant struct{ noFix, noInline bool }
	oursLeaf, oursPair := map[variant]map[string]float64{}, map[variant]map[string]float64{}
	for _, v := range []variant{{}, {noFix: true}, {noInline: true}, {true, true}} {
		oursLeaf[v], oursPair[v] = map[string]float64{}, map[string]float64{}
		for _, st := range ours.Stacks {
			var user []string
			for _, fr := range st.Frames {
				if fr.Kernel || (v.noInline && fr.Inlined) || (v.noFix && st.LeafFixed && fr.Addr == st.User[1]) {
					continue
				}
				user = append(user, fr.Func)
			}
			addLeaf(oursLeaf[v], oursPair[v], user, float64(st.Count))
		}
	}
	goLeaf, goPair := map[string]float64{}, map[string]float64{}
	for _, s := range theirs.Sample {
		var user []string
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				user = append(user, l.Function.Name)
			}
		}
		addLeaf(goLeaf, goPair, user, float64(s.Value[0]))
	}
	// The leaf mix depends on how the two goroutines shared the CPUs, the
	// same for both profilers but seen through sampling noise; the callers
	// given a leaf do not, so they are compared per leaf.
	leaf := overlap(oursLeaf[variant{}], goLeaf)
	pair := callerAgreement(oursLeaf[variant{}], oursPair[variant{}], goPair)
	var n int64
	for _, st := range ours.Stacks {
		n += st.Count
	}
	t.Logf("%d samples: leaf agreement %.1f%%, caller agreement given the leaf %.1f%%, leaf callers fixed in %d", n, 100*leaf, 100*pair, raw.LeafFixed)
	for _, v := range []variant{{noFix: true}, {noInline: true}, {true, true}} {
		t.Logf("without fix-up %v, without inlined frames %v: leaf %.1f%%, caller given the leaf %.1f%%", v.noFix, v.noInline,
			100*overlap(oursLeaf[v], goLeaf), 100*callerAgreement(oursLeaf[v], oursPair[v], goPair))
	}
	minLeaf := 0.9
	if n < 300 {
		minLeaf = 0.75 // a loaded machine: few samples, a noisy mix
	}
	if leaf < minLeaf || pair < 0.9 {
		t.Errorf("agreement with Go's profile: leaf %.2f (want >= %.2f), caller given the leaf %.2f (want >= 0.9)\nours %v\ngo's %v",
			leaf, minLeaf, pair, top(oursPair[variant{}]), top(goPair))
	}
}

// callerAgreement weighs, by our share of each leaf, the overlap of the
// callers of that leaf in both profiles (pair keys are "leaf <- caller").
func callerAgreement(leaf, ours, theirs map[string]float64) float64 {
	byLeaf := func(m map[string]float64) map[string]map[string]float64 {
		out := map[string]map[string]float64{}
		for k, v := range m {
			l, _, _ := strings.Cut(k, " <- ")
			if out[l] == nil {
				out[l] = map[string]float64{}
			}
			out[l][k] += v
		}
		return out
	}
	o, g := byLeaf(ours), byLeaf(theirs)
	var total, agree float64
	for l, v := range leaf {
		if g[l] == nil {
			continue // a leaf Go's profile did not see: the leaf test counts it
		}
		total += v
		agree += v * overlap(o[l], g[l])
	}
	if total == 0 {
		return 0
	}
	return agree / total
}

// addLeaf counts a stack's leaf and leaf+caller. Go's profiler puts some
// samples in runtime pseudo-frames (_ExternalCode, _GC, ...): those are
// skipped as they have no counterpart.
func addLeaf(leaf, pair map[string]float64, user []string, n float64) {
	if len(user) > 0 && user[0] == "runtime.asyncPreempt" {
		// Go's SIGPROF landed in a preemption it injected: the
		// interrupted function is the real leaf.
		user = user[1:]
	}
	if len(user) == 0 || strings.HasPrefix(user[0], "runtime._") {
		return
	}
	leaf[user[0]] += n
	caller := ""
	if len(user) > 1 {
		caller = user[1]
	}
	pair[user[0]+" <- "+caller] += n
}

// overlap is the sum over keys of the smaller of the two normalized shares.
func overlap(a, b map[string]float64) float64 {
	var ta, tb float64
	for _, v := range a {
		ta += v
	}
	for _, v := range b {
		tb += v
	}
	if ta == 0 || tb == 0 {
		return 0
	}
	var s float64
	for k, v := range a {
		s += min(v/ta, b[k]/tb)
	}
	return s
}

func top(m map[string]float64) map[string]float64 {
	var total float64
	for _, v := range m {
		total += v
	}
	out := map[string]float64{}
	for k, v := range m {
		if v/total > 0.02 {
			out[k] = float64(int(1000*v/total)) / 10
		}
	}
	return out
}

func TestNotFound(t *testing.T) {
	_, err := Sample(context.Background(), Options{PID: 536870000, Duration: time.Second})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("err %v, want ErrNotFound", err)
	}
}

// TestUserOnlyKernelLeaf samples user mode only, as an unprivileged user
// must: kernel time comes back as the synthetic leaf, weighted from /proc,
// so the kernel share stays about what it is.
func TestUserOnlyKernelLeaf(t *testing.T) {
	needPerf(t)
	bin := buildPatient(t, "getppid")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, 2*time.Second, Options{UserOnly: true})
	s := p.Summarize(10)
	if !s.UserOnly || len(s.Notes) == 0 {
		t.Errorf("user-only %v, notes %q", s.UserOnly, s.Notes)
	}
	if got := s.Classes[string(ClassNotSampled)]; got < 0.4 {
		t.Errorf("%s share %.2f, want most of the time: %v", ClassNotSampled, got, s.Classes)
	}
	for _, st := range p.Stacks {
		if !st.Synthetic && len(st.Kernel) > 0 {
			t.Fatalf("kernel frames in a user-only profile: %v", st.Frames)
		}
	}
	if lo, hi := coverageBounds(s.Samples); s.Coverage == nil || *s.Coverage < lo || *s.Coverage > hi {
		t.Errorf("coverage %v over %d samples, want %.2f-%.2f with the synthetic leaf", s.Coverage, s.Samples, lo, hi)
	}
}

// TestNewThreadsPickedUp: threads created while sampling get their event
// by the next poll for new threads.
func TestNewThreadsPickedUp(t *testing.T) {
	testenv.Timing(t)
	needPerf(t)
	bin := buildPatient(t, "threads")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, 2*time.Second, Options{PerThread: true})
	if p.PerCPU {
		t.Fatal("per-CPU events despite PerThread")
	}
	if p.NewThreads < 3 {
		t.Fatalf("%d new threads seen during the run, want several", p.NewThreads)
	}
	// A new thread waits for the next poll: at most the longest poll
	// interval, plus how late the latest poll finished (a busy machine
	// delays the sampler), plus /proc's 10 ms resolution of its start.
	if bound := pollMax + p.PollLate + 10*time.Millisecond; p.PickupMax > bound {
		t.Errorf("a new thread ran %s before it was sampled, want <= %s (a poll every %s at most, the latest %s late, 10 ms /proc resolution)",
			p.PickupMax, bound, pollMax, p.PollLate)
	}
	t.Logf("%d new threads, picked up within %s (polls up to %s late)", p.NewThreads, p.PickupMax, p.PollLate)
}

// TestOffCPU: a goroutine sleeping a millisecond at a time in nanosleep
// spends most of its time off CPU there, and the stacks say so.
func TestOffCPU(t *testing.T) {
	needPerf(t)
	needRoot(t)
	bin := buildPatient(t, "sleeper")
	cmd := startPatient(t, bin)
	d := 2 * time.Second
	raw, err := Sample(context.Background(), Options{PID: cmd.Process.Pid, Duration: d, OffCPU: true})
	if errors.Is(err, perf.ErrNoTracefs) || errors.Is(err, perf.ErrPermission) {
		testenv.Missing(t, testenv.Tracefs, "no sched_switch tracepoint: "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	p := Symbolize(raw)
	// Every function, not the first 10: the list is ordered by flat share
	// first, and when a third class of blocked time shows up (a thread
	// made, a page fault), it and the kernel and runtime frames on every
	// stack (cumulative share 1) push main.nap past the 10th place. That
	// failed 2 runs in 5 here.
	o := p.Summarize(1000).OffCPU
	if o == nil {
		t.Fatal("no off-CPU summary")
	}
	t.Logf("off-CPU %.2fs kept, %.2fs filtered, %d switches, %d lost, classes %v", o.Seconds, o.FilteredSeconds, o.Switches, o.Lost, o.Classes)
	if o.Classes["syscall nanosleep"] < 0.5 {
		t.Errorf("syscall nanosleep has %.2f of the off-CPU time, want most", o.Classes["syscall nanosleep"])
	}
	wall := p.End.Sub(p.Start)
	if o.Seconds < 0.5*d.Seconds() || (o.Lost == 0 && o.Seconds > 1.2*wall.Seconds()) {
		t.Errorf("%.2fs off CPU in %s for a thread that mostly sleeps", o.Seconds, wall)
	}
	var nap bool
	for _, f := range o.Top {
		nap = nap || (f.Function == "main.nap" && f.CumShare > 0.5)
	}
	if !nap {
		t.Errorf("main.nap is not on most off-CPU stacks: %v", o.Top)
	}
}

// TestOlderGoLayout reads a binary built by Go 1.18 or 1.19 (their pclntab
// and inline-tree layouts differ from Go 1.20's) when the system has one:
// Debian's prometheus-node-exporter is built with Go 1.19.
func TestOlderGoLayout(t *testing.T) {
	t.Parallel()
	const bin = "/usr/bin/prometheus-node-exporter"
	out, err := exec.Command("go", "version", bin).Output()
	if err != nil || !(bytes.Contains(out, []byte("go1.18")) || bytes.Contains(out, []byte("go1.19"))) {
		testenv.Missing(t, testenv.NodeExporter, fmt.Sprintf("no Go 1.18/1.19 binary at %s (%s)", bin, bytes.TrimSpace(out)))
	}
	o, n, bad, inlined := compareWithGosym(t, bin, 7, 29)
	if o.gt.go120 || o.gt.gofunc == 0 {
		t.Fatalf("table %+v: want the Go 1.18 layout with inline trees", o.gt)
	}
	if bad > 0 || inlined == 0 {
		t.Errorf("%d of %d PCs disagree with debug/gosym; %d with inlined frames", bad, n, inlined)
	}
}

// TestPerCPUAndPerThreadAgree samples the same patient both ways: the
// per-CPU events (root) and per-thread events see the same stacks.
func TestPerCPUAndPerThreadAgree(t *testing.T) {
	needPerf(t)
	needRoot(t)
	bin := buildPatient(t, "getppid")
	cmd := startPatient(t, bin)
	for _, perThread := range []bool{false, true} {
		p := sampleFor(t, cmd.Process.Pid, 1500*time.Millisecond, Options{PerThread: perThread, PerCPU: !perThread})
		if p.PerCPU == perThread {
			t.Errorf("PerThread %v gave PerCPU %v", perThread, p.PerCPU)
		}
		s := p.Summarize(20)
		cum := map[string]float64{}
		for _, f := range s.TopCum {
			cum[f.Function] = f.CumShare
			if syscallFunc(f.Function) == "getppid" {
				cum["getppid's kernel function"] += f.CumShare
			}
		}
		if s.KernelShare < 0.4 || cum["main.main"] < 0.9 || cum["syscall.Getppid"] < 0.5 || cum["do_syscall_64"] < 0.3 || cum["getppid's kernel function"] == 0 {
			t.Errorf("PerThread %v: %d samples, kernel share %.2f, cumulative shares %v", perThread, s.Samples, s.KernelShare, cum)
		}
		if s.Coverage != nil {
			t.Logf("PerThread %v: %d samples, coverage %.3f", perThread, s.Samples, *s.Coverage)
		}
	}
}

// coverageBounds is the range a coverage over n samples must fall in:
// tight when there are enough samples for /proc's 10 ms ticks and the
// sampling noise not to matter.
func coverageBounds(n int64) (lo, hi float64) {
	if n >= 150 {
		return 0.9, 1.1
	}
	return 0.6, 1.4
}

// TestAutoMovesToPerCPU: a target that switches tens of thousands of times
// a second makes the default sampler move to per-CPU events, and the
// samples before and after the move add up to the target's CPU time.
func TestAutoMovesToPerCPU(t *testing.T) {
	needPerf(t)
	needRoot(t)
	bin := buildPatient(t, "pingpong")
	cmd := startPatient(t, bin)
	p := sampleFor(t, cmd.Process.Pid, 3*time.Second, Options{})
	s := p.Summarize(10)
	if !p.PerCPU || !strings.Contains(strings.Join(s.Notes, "\n"), "moved from per-thread to per-CPU") {
		t.Fatalf("per-CPU %v, notes %q", p.PerCPU, s.Notes)
	}
	// Per-CPU cpu-clock samples of a task switching ~78,000 times a second
	// are biased low against /proc on this VM kind, and not by gosleuth:
	// perf record -a -F 99 -e cpu-clock on the same patient caught 0.42 and
	// 0.58 of its /proc CPU (gosleuth 0.49-0.87 across the move, where its
	// per-thread events give 0.99-1.00; they were also seen 25% high on a
	// loaded VM). The profile prints its coverage so a user sees this;
	// only a gross error (no samples, or samples for others) fails here.
	t.Logf("coverage %.3f over %d samples; notes %q", deref(s.Coverage), s.Samples, s.Notes)
	if s.Coverage == nil || *s.Coverage < 0.25 || *s.Coverage > 1.6 {
		t.Errorf("coverage %.3f over %d samples across the move", deref(s.Coverage), s.Samples)
	}
}

func deref(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}

// compareWithGosym symbolizes every pcStep-th PC of every funcStep-th
// function of bin and counts the PCs whose outermost function differs from
// debug/gosym's answer, and those with inlined frames.
func compareWithGosym(t *testing.T, bin string, funcStep int, pcStep uint64) (o *object, n, bad, inlined int) {
	t.Helper()
	o, err := loadObject(bin)
	if err != nil {
		t.Fatal(err)
	}
	if o.gt == nil {
		t.Fatalf("no Go table: %v", o.goErr)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	data, err := ef.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, o.gt.text))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range tab.Funcs {
		if i%funcStep != 0 {
			continue
		}
		for pc := f.Entry; pc < f.End; pc += pcStep {
			n++
			fr, ok := o.symbolize(pc, nil)
			if !ok || fr[len(fr)-1].Func != f.Name {
				if bad++; bad < 5 {
					t.Errorf("%#x: %v, want %s", pc, fr, f.Name)
				}
			}
			if len(fr) > 1 && fr[0].Inlined && fr[0].Func != "" {
				inlined++
			}
		}
	}
	return o, n, bad, inlined
}

// TestNextPoll: the sampler polls sooner while a ring fills, at the usual
// pace while threads come and go, and later only after a quiet spell.
func TestNextPoll(t *testing.T) {
	type poll struct {
		fill    float64
		changed bool
	}
	quietSpell := make([]poll, quietPolls)
	for _, tc := range []struct {
		name  string
		polls []poll
		want  time.Duration
	}{
		{"first poll", []poll{{0, true}}, pollInterval},
		{"a filling ring", []poll{{0.6, false}}, pollInterval / 2},
		{"a ring filling poll after poll", []poll{{0.6, false}, {0.7, false}, {0.9, false}, {0.9, false}}, pollMin},
		{"quiet, but not for long", quietSpell[1:], pollInterval},
		{"a quiet spell", quietSpell, pollMax},
		{"a quiet spell, then a new thread", append(slices.Clone(quietSpell), poll{0, true}), pollInterval},
		{"a quiet spell with a ring a quarter full", append(slices.Clone(quietSpell[1:]), poll{0.25, false}), pollInterval},
		{"back to quiet after a fill", append([]poll{{0.6, false}}, quietSpell...), pollMax},
	} {
		every, quiet := pollInterval, 0
		for _, p := range tc.polls {
			every = nextPoll(every, p.fill, p.changed, &quiet)
		}
		if every != tc.want {
			t.Errorf("%s: next poll in %v, want %v", tc.name, every, tc.want)
		}
	}
}
