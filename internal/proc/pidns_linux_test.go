package proc

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestLocalPID: in its own namespace's procfs a PID is its own; from a
// child PID namespace reading the host's procfs (unshare --pid without a
// procfs of its own), a child's host PID translates to the PID this
// process knows it by, this process's own host PID to its PID 1, and the
// host's init, which has no PID in the child namespace, is refused.
func TestLocalPID(t *testing.T) {
	if os.Getenv("GOSLEUTH_LOCALPID_CHILD") == "1" {
		localPIDInChild(t)
		return
	}
	if got, err := NewFS("").LocalPID(os.Getpid()); err != nil || got != os.Getpid() {
		t.Errorf("LocalPID(self) = %d, %v; want %d", got, err, os.Getpid())
	}
	testenv.Require(t, testenv.Linux, testenv.Root)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--kill-child", os.Args[0], "-test.run=^TestLocalPID$", "-test.v")
	cmd.Env = append(os.Environ(), "GOSLEUTH_LOCALPID_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestLocalPID") {
		t.Fatalf("in a child PID namespace: %v\n%s", err, out)
	}
	t.Logf("in a child PID namespace:\n%s", out)
}

// localPIDInChild is TestLocalPID's half run inside the child namespace.
func localPIDInChild(t *testing.T) {
	fs := NewFS("")
	hostSelf, err := os.Readlink("/proc/self")
	if err != nil {
		t.Fatal(err)
	}
	if hostSelf == strconv.Itoa(os.Getpid()) {
		t.Fatalf("/proc is this namespace's procfs (self %s): not the case under test", hostSelf)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	// The child's host PID: among this process's threads' children.
	hostChild := 0
	tasks, _ := os.ReadDir("/proc/" + hostSelf + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + hostSelf + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			hostChild, _ = strconv.Atoi(f)
		}
	}
	if hostChild == 0 {
		t.Fatal("the child's host PID was not found")
	}
	host, _ := strconv.Atoi(hostSelf)
	for _, tt := range []struct{ pid, want int }{{hostChild, sleep.Process.Pid}, {host, os.Getpid()}} {
		if got, err := fs.LocalPID(tt.pid); err != nil || got != tt.want {
			t.Errorf("LocalPID(%d) = %d, %v; want %d", tt.pid, got, err, tt.want)
		}
	}
	if got, err := fs.LocalPID(1); !errors.Is(err, ErrOtherPIDNamespace) {
		t.Errorf("LocalPID(1), the host's init: %d, %v; want ErrOtherPIDNamespace", got, err)
	} else {
		t.Logf("LocalPID(1): %v", err)
	}
	t.Logf("host PID %d is %d here, host PID %d (this test) is %d", hostChild, sleep.Process.Pid, host, os.Getpid())
}
