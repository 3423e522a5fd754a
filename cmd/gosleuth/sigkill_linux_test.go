package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

// Evidence a CLI leaves while attached, each kind checked after a SIGKILL.
const (
	evPerf  = 1 << iota // its processes hold perf_event descriptors
	evBPF               // its processes hold BPF descriptors (programs, links, maps)
	evProg              // a tracing BPF program loaded since it started exists
	evLink              // a BPF link made since it started exists
	evText              // the target's executable text differs (an int3)
	evGroup             // tracefs uprobe_events holds its gosleuth_PID group
	evExit              // the CLI's process has not finished exiting
)

var evNames = []string{"perf_event fds", "bpf fds", "new BPF program", "new BPF link", "int3 in the target's text", "tracefs group", "CLI still exiting"}

func evString(e int) string {
	var s []string
	for i, n := range evNames {
		if e&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// TestSIGKILLEveryMechanism runs each attach mechanism of the CLI in a
// child against a Go patient, waits until the child is attached (every
// kind of evidence the row names is there: that is also what makes the
// checks below meaningful; a syscalls CLI also says it counts, and its
// releaser's events are seen counting), SIGKILLs it and requires, within
// a second, by system-wide checks: no BPF program or link made since the
// child started, no process of the child's (marked by an environment
// variable its children inherit, the syscalls releaser too) holding a
// perf_event or BPF descriptor (but for the events the syscalls releaser
// holds once none of them counts any more, read through descriptors
// taken from it: it releases them at the kernel's pace), no gosleuth_PID
// group of the child's in uprobe_events, the target's executable text
// byte-identical to before, the target alive and not stopped, and the
// CLI's exit complete (the kernel releases what it held in that exit;
// the doctor's gets up to 10 s, see exit below, the other checks still
// within 1 s).
func TestSIGKILLEveryMechanism(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.AMD64, testenv.Root, testenv.Perf, testenv.Tracefs, testenv.Uprobes, testenv.BPF)
	sleeper := testbin.Build(t, "../../internal/probe/testdata/patient")
	rows := []struct {
		name string
		// noprof runs the allocation patient with memory profiling off
		// (its allocations are then sampled by probes), else the probe
		// patient's 1 ms sleep loop.
		noprof bool
		args   []string // --pid PID goes after the command's name
		want   int      // the evidence that says it is attached
		// exit, when set, is how long the killed CLI's exit may take:
		// the kernel releases the perf events it held there, and the
		// last event on a syscall tracepoint waits for RCU grace
		// periods (some 40 ms a tracepoint), with the BPF program and
		// link released after them. The rest is checked within 1 s.
		exit time.Duration
	}{
		{"profile", false, []string{"profile", "--duration", "1m", "--events", "thread", "-o", os.DevNull}, evPerf, 0},
		{"profile per CPU", false, []string{"profile", "--duration", "1m", "--events", "cpu", "-o", os.DevNull}, evPerf, 0},
		// Every syscall (~360 tracepoints, some 10 s for the kernel to
		// release): the CLI's releaser holds them from attach on and,
		// once the CLI is killed, disables them at once and releases
		// them at its pace, so the CLI's exit is quick and nothing
		// counts the target within 1 s (see evidence).
		{"syscalls", false, []string{"syscalls", "--duration", "1m", "--format", "json"}, evPerf, 0},
		{"syscalls only", false, []string{"syscalls", "--duration", "1m", "--format", "json", "--only", "nanosleep,futex"}, evPerf, 0},
		{"syscalls latency", false, []string{"syscalls", "--duration", "1m", "--format", "json", "--only", "nanosleep,futex", "--latency"}, evPerf, 0},
		{"probe perf", false, []string{"probe", "--duration", "1m", "--attach", "perf", "time.Sleep"}, evPerf | evBPF | evProg | evLink | evText, 0},
		{"probe tracefs", false, []string{"probe", "--duration", "1m", "--attach", "tracefs", "time.Sleep"}, evPerf | evText | evGroup, 0},
		{"probe auto", false, []string{"probe", "--duration", "1m", "--attach", "auto", "time.Sleep"}, evBPF | evProg | evLink | evText, 0},
		{"allocs sampled", true, []string{"profile", "--type", "allocs", "--duration", "1m", "-o", os.DevNull}, evBPF | evProg | evLink | evText, 0},
		{"doctor", false, []string{"doctor", "--duration", "1m"}, evPerf | evBPF | evProg | evLink | evText, 10 * time.Second},
		// The exporter watches the whole host (no --pid): one BPF task
		// iterator.
		{"exporter bpf", false, []string{"exporter", "--bpf", "--listen", "127.0.0.1:0"}, evBPF | evProg | evLink, 0},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var target *exec.Cmd
			if row.noprof {
				bin := testbin.BuildWith(t, "../../internal/allocview/testdata/allocs", "-trimpath=false", "-tags=noprof")
				target = exec.Command(bin)
				target.Env = append(os.Environ(), "GOGC=10")
			} else {
				target = exec.Command(sleeper, "-mode", "sleep")
			}
			pid := testbin.Start(t, target, testbin.Options{}).PID()
			k := newKillCheck(t, pid)
			start := time.Now()
			args := row.args
			if args[0] != "exporter" {
				args = append([]string{args[0], "--pid", strconv.Itoa(pid)}, args[1:]...)
			}
			cli := k.startCLI(args)
			got := k.waitEvidence(row.want, 20*time.Second)
			attached := time.Since(start)
			if got&row.want != row.want {
				t.Fatalf("after %v the CLI shows %s, want %s: the checks after the kill would prove nothing\nstderr: %s",
					attached.Round(time.Millisecond), evString(got), evString(row.want), k.stderr())
			}
			if args[0] == "syscalls" {
				k.waitCounting(20 * time.Second)
				attached = time.Since(start)
			}
			killed := time.Now()
			cli.Process.Kill()
			slow := 0
			if row.exit > 0 {
				// What the exit itself releases, in descriptor order:
				// the doctor's uprobe links (and their int3) and BPF
				// programs come after its perf events, and were still
				// there 1 s after the kill in 1 run of 4-5 on a loaded
				// host (1.4-1.5 s in all when idle). The releaser's
				// events, the groups and the target are held to 1 s.
				slow = evExit | evProg | evLink | evText | evBPF
			}
			left := k.waitClean(time.Second, slow)
			if row.exit > 0 && left == nil {
				left = k.waitClean(row.exit, 0)
			}
			t.Logf("attached after %v with %s; clean %v after SIGKILL", attached.Round(time.Millisecond),
				evString(got), time.Since(killed).Round(time.Millisecond))
			for _, l := range left {
				t.Error(l)
			}
		})
	}
}

// killCheck holds what the system looked like before a CLI child started
// and watches what it leaves.
type killCheck struct {
	t      *testing.T
	target int
	mark   string // GOSLEUTH_SIGKILL_MARK=<value> in the environment of the CLI and its children
	progs  map[ebpf.ProgramID]bool
	links  map[ebpflink.ID]bpfLink
	text   []textRange
	events string // tracefs uprobe_events
	errf   *os.File
	cli    *exec.Cmd
	reaped chan struct{} // closed once the CLI's exit is complete and reaped
}

// textRange is an executable mapping of the target's own binary and its
// bytes before the CLI started.
type textRange struct {
	start, end uint64
	orig       []byte
}

func newKillCheck(t *testing.T, target int) *killCheck {
	t.Helper()
	k := &killCheck{t: t, target: target, reaped: make(chan struct{}), mark: fmt.Sprintf("GOSLEUTH_SIGKILL_MARK=%d-%d", os.Getpid(), time.Now().UnixNano())}
	var err error
	if k.progs, k.links, err = bpfIDs(); err != nil {
		t.Fatal(err)
	}
	k.text = targetText(t, target)
	k.events = uprobeEventsNow(t)
	return k
}

// startCLI runs the CLI with args in a child whose output goes to files
// (so waiting for it never waits on a pipe a survivor holds).
func (k *killCheck) startCLI(args []string) *exec.Cmd {
	t := k.t
	t.Helper()
	dir := t.TempDir()
	var err error
	if k.errf, err = os.Create(filepath.Join(dir, "stderr")); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = childEnv(args, k.mark)
	cmd.Stdout, cmd.Stderr = out, k.errf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	k.cli = cmd
	go func() { cmd.Wait(); close(k.reaped) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-k.reaped
		k.errf.Close()
		// Whatever a failed row left, the next starts clean.
		for _, p := range k.marked() {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})
	return cmd
}

func (k *killCheck) stderr() string {
	b, _ := os.ReadFile(k.errf.Name())
	return string(b)
}

// evidence returns the kinds of evidence present now, with one line on
// each for the failure messages of waitClean.
func (k *killCheck) evidence() (int, []string) {
	var e int
	var why []string
	add := func(kind int, format string, args ...any) {
		e |= kind
		why = append(why, fmt.Sprintf(format, args...))
	}
	for _, p := range k.marked() {
		perfN, bpfN := kernelFDs(p)
		switch {
		case perfN > 0 && p != k.cli.Process.Pid && isReleaser(p):
			if moved, err := perfCounting(p); err != nil {
				k.t.Fatal(err)
			} else if moved > 0 {
				add(evPerf, "the CLI's releaser (pid %d) holds %d perf_event descriptors, %d of those read still counting", p, perfN, moved)
			}
		case perfN > 0:
			add(evPerf, "process %d (of the CLI's) holds %d perf_event descriptors", p, perfN)
		}
		if bpfN > 0 {
			add(evBPF, "process %d (of the CLI's) holds %d BPF descriptors", p, bpfN)
		}
	}
	// A process's descriptors leave /proc before its exit has released
	// what they held (a perf event on a tracepoint waits for RCU there,
	// while the group leader shows as a zombie already): the CLI's exit,
	// until it can be reaped, is part of the teardown.
	select {
	case <-k.reaped:
	default:
		add(evExit, "the CLI (pid %d) has not finished exiting", k.cli.Process.Pid)
	}
	if perfN, bpfN := kernelFDs(k.target); perfN+bpfN > 0 {
		add(evPerf, "the target holds %d perf_event and %d BPF descriptors", perfN, bpfN)
	}
	progs, links, err := bpfIDs()
	if err != nil {
		k.t.Fatal(err)
	}
	for id := range progs {
		if k.progs[id] {
			continue
		}
		if desc, ours := k.ownProgram(id); ours {
			add(evProg, "BPF program %d (%s) loaded since the CLI started", id, desc)
		}
	}
	for id, l := range links {
		if _, old := k.links[id]; !old && l.desc != "" && !k.foreign(l.prog) {
			add(evLink, "BPF link %d (%s) made since the CLI started", id, l.desc)
		}
	}
	if n := k.textChanged(); n > 0 {
		add(evText, "%d bytes of the target's text differ from before", n)
	}
	group := "gosleuth_" + strconv.Itoa(k.cli.Process.Pid) + "/"
	if ev := uprobeEventsNow(k.t); strings.Contains(ev, group) {
		add(evGroup, "uprobe_events holds %s", group)
	}
	if st := procState(k.target); st == "" || st == "t" || st == "T" || st == "Z" || st == "X" {
		why = append(why, fmt.Sprintf("the target is in state %q: gone or stopped", st))
		e |= 1 << 30
	}
	return e, why
}

// waitEvidence waits until every kind of evidence in want is present (or
// the CLI ends, or wait passes) and returns what is.
func (k *killCheck) waitEvidence(want int, wait time.Duration) int {
	deadline := time.Now().Add(wait)
	for {
		e, _ := k.evidence()
		if e&want == want || time.Now().After(deadline) || procState(k.cli.Process.Pid) == "" {
			return e
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCounting waits until a syscalls CLI says it counts (it has attached
// every event) and requires its releaser, if it has one, to hold events
// that count, which the checks after the kill require to stop.
func (k *killCheck) waitCounting(wait time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(wait)
	for !strings.Contains(k.stderr(), "gosleuth syscalls: counting") {
		if time.Now().After(deadline) {
			k.t.Fatalf("no counting line from the CLI after %v\nstderr: %s", wait, k.stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range k.marked() {
		if p == k.cli.Process.Pid || !isReleaser(p) {
			continue
		}
		moved, err := perfCounting(p)
		if err != nil {
			k.t.Fatal(err)
		}
		if moved == 0 {
			k.t.Fatalf("the CLI's releaser (pid %d) holds no event that counts the target: the check after the kill proves nothing", p)
		}
		return
	}
	k.t.Logf("the CLI counts without a releaser")
}

// waitClean waits until no evidence is left but the kinds in ignore, or
// wait passes, and returns what is left.
func (k *killCheck) waitClean(wait time.Duration, ignore int) []string {
	deadline := time.Now().Add(wait)
	for {
		e, why := k.evidence()
		if e&^ignore == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return why
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ownProgram says whether the new program id can be the CLI's: one of the
// types gosleuth loads (tracing kinds: kprobe for uprobes, tracepoint,
// perf_event, tracing), not foreign (another test loading its own at the
// same time), and describes it.
func (k *killCheck) ownProgram(id ebpf.ProgramID) (string, bool) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", false // gone meanwhile
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return "", false
	}
	switch info.Type {
	case ebpf.Kprobe, ebpf.TracePoint, ebpf.RawTracepoint, ebpf.PerfEvent, ebpf.Tracing:
	default:
		return "", false
	}
	return fmt.Sprintf("%s %q", info.Type, info.Name), !k.foreign(id)
}

// foreign says whether a process outside the CLI's holds BPF program id
// or a link of it.
func (k *killCheck) foreign(id ebpf.ProgramID) bool {
	for _, h := range progHolders(id) {
		if h != os.Getpid() && h != k.target && !slices.Contains(k.marked(), h) {
			return true
		}
	}
	return false
}

// marked returns the live processes with the CLI's mark in their
// environment.
func (k *killCheck) marked() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, []byte("\x00"+k.mark+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (k *killCheck) textChanged() int {
	f, err := os.Open("/proc/" + strconv.Itoa(k.target) + "/mem")
	if err != nil {
		return 0 // the target's state check reports it gone
	}
	defer f.Close()
	var n int
	for _, r := range k.text {
		b := make([]byte, len(r.orig))
		if _, err := f.ReadAt(b, int64(r.start)); err != nil {
			k.t.Fatalf("read the target's text at %#x: %v", r.start, err)
		}
		for i := range b {
			if b[i] != r.orig[i] {
				n++
			}
		}
	}
	return n
}

// targetText reads the executable mappings of pid's own binary.
func targetText(t *testing.T, pid int) []textRange {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	exe, err := os.Readlink(dir + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rs []textRange
	for _, line := range strings.Split(string(maps), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 6 || !strings.Contains(fs[1], "x") || fs[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("maps line %q", line)
		}
		b := make([]byte, end-start)
		if _, err := f.ReadAt(b, int64(start)); err != nil {
			t.Fatalf("read the target's text: %v", err)
		}
		rs = append(rs, textRange{start, end, b})
	}
	if len(rs) == 0 {
		t.Fatalf("no executable mapping of %s in %s/maps", exe, dir)
	}
	return rs
}

// bpfLink is a BPF link's program and description ("" for kinds
// gosleuth does not make).
type bpfLink struct {
	prog ebpf.ProgramID
	desc string
}

// bpfIDs returns the IDs of every BPF program and of every BPF link.
func bpfIDs() (map[ebpf.ProgramID]bool, map[ebpflink.ID]bpfLink, error) {
	progs := map[ebpf.ProgramID]bool{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list BPF programs: %w", err)
		}
		progs[next], id = true, next
	}
	links := map[ebpflink.ID]bpfLink{}
	it := new(ebpflink.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		l := bpfLink{prog: info.Program}
		switch info.Type {
		case ebpflink.UprobeMultiType, ebpflink.PerfEventType, ebpflink.RawTracepointType, ebpflink.TracingType, ebpflink.KprobeMultiType, ebpflink.IterType:
			l.desc = fmt.Sprintf("type %d, program %d", info.Type, info.Program)
		}
		links[it.ID] = l
	}
	if err := it.Err(); err != nil {
		return nil, nil, fmt.Errorf("list BPF links: %w", err)
	}
	return progs, links, nil
}

// progHolders returns the processes holding a descriptor of BPF program
// id (the program itself, or a link of it).
func progHolders(id ebpf.ProgramID) []int {
	want := fmt.Sprintf("prog_id:\t%d\n", id)
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		fds, _ := os.ReadDir(dir + "/fd")
		for _, fd := range fds {
			l, _ := os.Readlink(dir + "/fd/" + fd.Name())
			if !strings.HasPrefix(l, "anon_inode:bpf") {
				continue
			}
			if b, err := os.ReadFile(dir + "/fdinfo/" + fd.Name()); err == nil && strings.Contains(string(b), want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// isReleaser says whether pid is a syscalls releaser.
func isReleaser(pid int) bool {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	return err == nil && bytes.Contains(env, []byte("\x00GOSLEUTH_RELEASE_PERF_FDS=1\x00"))
}

// perfCounting takes its own references (pidfd_getfd) to up to 16 of the
// perf events pid holds, spread over its descriptors (a read of a group's
// member gives the counts of the whole group, the events of one thread),
// reads them twice 150 ms apart and returns how many changed.
func perfCounting(pid int) (int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	var nums []int
	for _, e := range ents {
		if l, _ := os.Readlink(filepath.Join(dir, e.Name())); l == "anon_inode:[perf_event]" {
			n, _ := strconv.Atoi(e.Name())
			nums = append(nums, n)
		}
	}
	if len(nums) == 0 {
		return 0, nil
	}
	slices.Sort(nums)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	const most = 16
	for i := range min(most, len(nums)) {
		fd, err := unix.PidfdGetfd(pidfd, nums[i*len(nums)/min(most, len(nums))], 0)
		if err == nil {
			fds = append(fds, fd) // else closed meanwhile
		} else if !errors.Is(err, unix.EBADF) && !errors.Is(err, unix.ESRCH) {
			return 0, fmt.Errorf("pidfd_getfd from %d: %w", pid, err)
		}
	}
	read := func() [][]byte {
		var out [][]byte
		buf := make([]byte, 1<<16)
		for _, fd := range fds {
			n, err := unix.Read(fd, buf)
			if err != nil {
				n = 0
			}
			out = append(out, slices.Clone(buf[:n]))
		}
		return out
	}
	before := read()
	time.Sleep(150 * time.Millisecond)
	moved := 0
	for i, b := range read() {
		if !bytes.Equal(b, before[i]) {
			moved++
		}
	}
	return moved, nil
}

func uprobeEventsNow(t *testing.T) string {
	t.Helper()
	root, err := tracefs.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "uprobe_events"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
