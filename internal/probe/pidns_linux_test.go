package probe

import (
	"cmp"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
)

// The calls each namespace case counts: four threads of 10,000, two of
// them started after the probes attached.
const (
	nsCalls = "10000"
	nsDone  = "done 40000"
)

// TestPIDNamespaces: calls are counted exactly, by every mechanism, when
// the patient runs in a PID namespace of its own (unshare --pid), and when
// the probing process runs in one with the patient: with that namespace's
// procfs mounted (unshare --mount-proc), and reading the host's /proc,
// where the patient's PID there is translated to the one the kernel takes
// from inside. The BPF program attached to perf events compared the
// initial namespace's PID with the target's and dropped every hit of the
// last two cases.
func TestPIDNamespaces(t *testing.T) {
	if os.Getenv("GOSLEUTH_PROBE_NS_CHILD") != "" {
		probeInsideNamespace(t)
		return
	}
	needProbes(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	bin := testbin.BuildWith(t, "./testdata/patient", "-ldflags=-s -w")
	t.Run("patient in its own namespace", func(t *testing.T) {
		for _, attach := range []string{AttachAuto, AttachPerf, AttachTracefs} {
			p := startCmd(t, exec.Command(unshare, "--pid", "--fork", "--kill-child", bin, "-mode", "count", "-n", nsCalls))
			pid := childOf(t, "/proc", p.cmd.Process.Pid)
			expectExact(t, attach, countCalls(t, proc.NewFS(""), pid, attach, []*patient{p}, nsDone))
		}
	})
	for _, tc := range []struct{ name, mountProc string }{
		{"gosleuth and patient in one namespace, its own procfs", "--mount-proc"},
		{"gosleuth and patient in one namespace, the host's procfs", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--pid", "--fork", "--kill-child"}
			if tc.mountProc != "" {
				args = append(args, tc.mountProc)
			}
			args = append(args, os.Args[0], "-test.run=^TestPIDNamespaces$", "-test.v")
			cmd := exec.Command(unshare, args...)
			cmd.Env = append(os.Environ(), "GOSLEUTH_PROBE_NS_CHILD="+bin)
			out, err := cmd.CombinedOutput()
			t.Logf("inside:\n%s", out)
			if err != nil || !strings.Contains(string(out), "--- PASS: TestPIDNamespaces") {
				t.Fatalf("inside the namespace: %v", err)
			}
		})
	}
}

// probeInsideNamespace is TestPIDNamespaces's half run inside the new PID
// namespace: the patient is this process's child, and its PID is read
// from /proc as mounted there (this namespace's, or the host's).
func probeInsideNamespace(t *testing.T) {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	ownProc := self == strconv.Itoa(os.Getpid())
	t.Logf("PID %d here, /proc/self %s: /proc is this namespace's: %v", os.Getpid(), self, ownProc)
	for _, attach := range []string{AttachAuto, AttachPerf, AttachTracefs} {
		p := startCmd(t, exec.Command(os.Getenv("GOSLEUTH_PROBE_NS_CHILD"), "-mode", "count", "-n", nsCalls))
		pid := p.cmd.Process.Pid
		if !ownProc {
			host, _ := strconv.Atoi(self)
			pid = childOf(t, "/proc", host)
		}
		t.Logf("%s: the patient is PID %d here, %d in /proc", cmp.Or(attach, "auto"), p.cmd.Process.Pid, pid)
		expectExact(t, attach, countCalls(t, proc.NewFS(""), pid, attach, []*patient{p}, nsDone))
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// childOf returns the one child of process pid listed in root.
func childOf(t *testing.T, root string, pid int) int {
	t.Helper()
	tasks, _ := os.ReadDir(root + "/" + strconv.Itoa(pid) + "/task")
	var kids []string
	for _, task := range tasks {
		b, _ := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) != 1 {
		t.Fatalf("children of %d: %q, want one", pid, kids)
	}
	child, _ := strconv.Atoi(kids[0])
	return child
}

// expectExact checks that main.hit was counted exactly by attach's
// mechanism.
func expectExact(t *testing.T, attach string, r *Result) {
	t.Helper()
	f := find(t, r, "main.hit")
	want, _ := strconv.Atoi(strings.TrimPrefix(nsDone, "done "))
	t.Logf("%s: %s: %d calls", cmp.Or(attach, "auto"), r.Mechanism, f.Count)
	if f.Count != uint64(want) {
		t.Errorf("%s: counted %d calls, the patient made %d (notes %q)", attach, f.Count, want, r.Notes)
	}
	if m := map[string]string{AttachAuto: mechMulti, AttachPerf: mechPerf, AttachTracefs: mechTracefs}[attach]; r.Mechanism != m {
		t.Errorf("%s: mechanism %q, want %q", attach, r.Mechanism, m)
	}
}

// TestOtherMountNamespace: a patient whose executable's path exists only
// in its own mount namespace (a container's, in effect: here a tmpfs
// mounted in an unshare --mount) is counted exactly by every mechanism;
// tracefs's definition once named the path /proc/PID/exe points to, and
// failed with "no such file or directory" for any containerised program.
func TestOtherMountNamespace(t *testing.T) {
	needProbes(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	bin := testbin.BuildWith(t, "./testdata/patient", "-ldflags=-s -w")
	dir := t.TempDir()
	script := `mount -t tmpfs gosleuth-test "$1" && cp "$2" "$1/patient" && exec "$1/patient" -mode count -n ` + nsCalls
	for _, attach := range []string{AttachTracefs, AttachAuto, AttachPerf} {
		p := startCmd(t, exec.Command(unshare, "--mount", "--fork", "--kill-child", "sh", "-c", script, "sh", dir, bin))
		pid := childOf(t, "/proc", p.cmd.Process.Pid)
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe != dir+"/patient" {
			t.Fatalf("the patient runs %q, want %s/patient", exe, dir)
		}
		if _, err := os.Stat(dir + "/patient"); err == nil {
			t.Fatalf("%s/patient is visible outside the patient's mount namespace", dir)
		}
		expectExact(t, attach, countCalls(t, proc.NewFS(""), pid, attach, []*patient{p}, nsDone))
	}
}
