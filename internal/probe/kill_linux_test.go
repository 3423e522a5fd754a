package probe

import (
	"bufio"
	"context"
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

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

// probeByte reads the byte at the probe point of fn in process pid: 0xCC
// while a uprobe is attached there.
func probeByte(t *testing.T, pid int, addr uint64) byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, int64(addr)); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// TestSIGKILLLeavesNothing runs the engine in a child process, SIGKILLs it
// while its probe is attached, and requires the target's code restored
// (no int3 at the probe) within 1 s, and the target alive.
func TestSIGKILLLeavesNothing(t *testing.T) {
	if os.Getenv("GOSLEUTH_PROBE_CHILD") != "" {
		pid, _ := strconv.Atoi(os.Getenv("GOSLEUTH_PROBE_CHILD"))
		Run(context.Background(), proc.NewFS(""), pid, []Probe{{Func: "time.Sleep", Stacks: true, Arg: RAX}},
			Options{Duration: time.Minute, Attach: os.Getenv("GOSLEUTH_PROBE_ATTACH"), Attached: func() { fmt.Println("attached") }})
		return
	}
	needProbes(t)
	for _, how := range []string{AttachAuto, AttachPerf, AttachTracefs} {
		name := how
		if name == AttachAuto {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) { sigkillLeavesNothing(t, how) })
	}
}

func sigkillLeavesNothing(t *testing.T, how string) {
	p := startPatient(t, nil, "-mode", "sleep") // not PIE: link-time addresses are the process's
	tg, err := Resolve(proc.NewFS(""), p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := tg.Find("time.Sleep")
	if err != nil {
		t.Fatal(err)
	}
	orig := probeByte(t, p.cmd.Process.Pid, pt.Addr)
	if orig != 0x55 {
		t.Fatalf("the probe point holds %#x before attaching, want PUSHQ BP (0x55)", orig)
	}
	child := startAttachedChild(t, "TestSIGKILLLeavesNothing", "GOSLEUTH_PROBE_CHILD="+strconv.Itoa(p.cmd.Process.Pid), "GOSLEUTH_PROBE_ATTACH="+how)
	if b := probeByte(t, p.cmd.Process.Pid, pt.Addr); b != 0xcc {
		t.Errorf("while attached the probe point holds %#x, want int3 (0xcc)", b)
	}
	_, events := uprobeEvents(t)
	group := tracefsGroup(child.Process.Pid) + "/"
	if how == AttachTracefs && !strings.Contains(events(), group) {
		t.Fatalf("while attached uprobe_events lacks %s: %q", group, events())
	}
	child.Process.Kill()
	t.Logf("int3 gone %v after SIGKILL", waitRestored(t, p.cmd.Process.Pid, pt.Addr, orig))
	if err := proc.CheckTarget("", p.cmd.Process.Pid); err != nil {
		t.Errorf("the target did not survive: %v", err)
	}
	if how != AttachTracefs {
		return
	}
	// A killed gosleuth cannot remove its tracefs definitions: its guard
	// does, within a second.
	child.Wait()
	for start := time.Now(); strings.Contains(events(), group); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > time.Second {
			t.Fatalf("1 s after SIGKILL uprobe_events still holds %s: %q", group, events())
		}
	}
}

// TestAttachDetachCycles attaches and detaches every recipe 100 times
// against a target that keeps creating threads and goroutines, and
// requires it alive and answering.
func TestAttachDetachCycles(t *testing.T) {
	needProbes(t)
	for _, tc := range []struct {
		name   string
		attach string
		cycles int
	}{
		{"auto", AttachAuto, 100},
		// One perf event per function: every cycle opens and closes one
		// per probe, so fewer cycles hold the test's time.
		{"perf", AttachPerf, 20},
		{"tracefs", AttachTracefs, 20},
	} {
		t.Run(tc.name, func(t *testing.T) { attachDetachCycles(t, tc.attach, tc.cycles) })
	}
}

func attachDetachCycles(t *testing.T, how string, cycles int) {
	p := startPatient(t, []string{"-ldflags=-s -w"}, "-mode", "churn")
	var all []Probe
	for _, n := range RecipeNames() {
		all = append(all, Recipes[n].Probes...)
	}
	start := time.Now()
	var detach []float64
	for i := range cycles {
		r, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid, all,
			Options{Duration: 20 * time.Millisecond, Preflight: 10 * time.Millisecond, Attach: how})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		detach = append(detach, r.DetachMS)
		if err := proc.CheckTarget("", p.cmd.Process.Pid); err != nil {
			t.Fatalf("cycle %d: the target died: %v", i, err)
		}
	}
	slices.Sort(detach)
	t.Logf("%d attach/detach cycles of %d probes in %v; detach median %.0f ms, max %.0f ms", cycles, len(all),
		time.Since(start).Round(time.Millisecond), detach[len(detach)/2], detach[len(detach)-1])
	// Still working: it answers with its count of finished rounds.
	io := p.in
	fmt.Fprintln(io, "ping")
	select {
	case l := <-p.lines:
		if l == "" {
			t.Errorf("the target stopped answering")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the target did not answer after the cycles")
	}
}

// TestNextRunRemovesStaleGroup SIGKILLs a run attached through tracefs,
// which leaves its gosleuth_<PID> definitions in uprobe_events, and
// requires the next run to remove them whatever mechanism it attaches with
// (BPF here, when the kernel has it).
func TestNextRunRemovesStaleGroup(t *testing.T) {
	needProbes(t)
	p := startPatient(t, nil, "-mode", "sleep")
	child := exec.Command(os.Args[0], "-test.run=^TestSIGKILLLeavesNothing$")
	child.Env = append(os.Environ(), "GOSLEUTH_PROBE_CHILD="+strconv.Itoa(p.cmd.Process.Pid), "GOSLEUTH_PROBE_ATTACH="+AttachTracefs)
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "attached" {
		child.Process.Kill()
		child.Wait()
		t.Fatalf("child: %q", sc.Text())
	}
	// Its guard killed first, as a SIGKILL of every process of gosleuth's
	// would: the definitions stay.
	killGuard(t, child.Process.Pid)
	child.Process.Kill()
	child.Wait()
	_, events := uprobeEvents(t)
	group := tracefsGroup(child.Process.Pid) + "/"
	if !strings.Contains(events(), group) {
		t.Fatalf("no definition of %s left after SIGKILL: %q", group, events())
	}
	if _, err := Run(context.Background(), proc.NewFS(""), p.cmd.Process.Pid, []Probe{{Func: "time.Sleep"}},
		Options{Duration: 20 * time.Millisecond, Preflight: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if e := events(); strings.Contains(e, group) {
		t.Errorf("after the next run uprobe_events still holds %s: %q", group, e)
	}
}

// killGuard SIGKILLs the guard of gosleuth process pid and waits until it
// is gone.
func killGuard(t *testing.T, pid int) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !strings.Contains(string(env), "\x00"+guardEnv+"="+strconv.Itoa(pid)+" ") {
			continue
		}
		g, _ := strconv.Atoi(e.Name())
		if err := syscall.Kill(g, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Gone, or a zombie its parent (which never waits for it) keeps.
		for {
			st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		return
	}
	t.Fatalf("no guard of process %d", pid)
}

// uprobeEvents returns tracefs's root and a reader of its uprobe_events.
func uprobeEvents(t *testing.T) (string, func() string) {
	t.Helper()
	root, err := tracefs.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root, func() string {
		b, err := os.ReadFile(filepath.Join(root, "uprobe_events"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// startAttachedChild runs test again in a child process of this test
// binary with env added (the child attaches probes and prints "attached")
// and returns once it has said so; the child is killed and reaped when the
// test ends.
func startAttachedChild(t *testing.T, test string, env ...string) *exec.Cmd {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	child.Env = append(os.Environ(), env...)
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "attached" {
		t.Fatalf("child: %q", sc.Text())
	}
	return child
}

// waitRestored waits until the byte at addr in process pid holds orig
// again after a SIGKILL of the prober (the kernel removing its int3), at
// most a second, and returns how long it took.
func waitRestored(t *testing.T, pid int, addr uint64, orig byte) time.Duration {
	t.Helper()
	killed := time.Now()
	for {
		b := probeByte(t, pid, addr)
		if b == orig {
			return time.Since(killed).Round(time.Millisecond)
		}
		if time.Since(killed) > time.Second {
			t.Fatalf("1 s after SIGKILL the probe point still holds %#x", b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
