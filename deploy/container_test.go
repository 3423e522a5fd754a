package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// limit is an rlimit as podman's --ulimit takes it ("-1" for none).
func limit(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "-1"
	}
	return strconv.FormatUint(v, 10)
}

// podman runs podman as this machine kind needs it: runc with the cgroupfs
// manager (crun refuses hybrid cgroups) and the limits given explicitly:
// podman's defaults (a million descriptors) are above this process's hard
// limit, and a container without CAP_SYS_RESOURCE cannot raise them, so
// it gets this process's descriptor limit and at most podman's own 32768
// processes.
func podman(args ...string) (stdout, stderr string, err error) {
	if args[0] == "run" {
		var nofile, nproc unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile)
		unix.Getrlimit(unix.RLIMIT_NPROC, &nproc)
		n := limit(min(nproc.Cur, 32768))
		args = append([]string{"run", "--runtime", "/usr/sbin/runc", "--cgroup-manager", "cgroupfs",
			"--ulimit", "nofile=" + limit(nofile.Cur) + ":" + limit(nofile.Cur),
			"--ulimit", "nproc=" + n + ":" + n}, args[1:]...)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command("podman", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// buildImage builds the image with build-image.sh under a tag of the
// test's own and removes it when the test ends.
func buildImage(t *testing.T) string {
	t.Helper()
	tag := fmt.Sprintf("localhost/gosleuth-test:%d", os.Getpid())
	out, err := exec.Command("./build-image.sh", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("build-image.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { podman("rmi", "-f", tag) })
	return tag
}

// startPatient starts the 1 ms ticker patient on the host and returns its
// PID.
func startPatient(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "../internal/web/testdata/patient"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("patient: %q, %v", l, err)
	}
	return cmd.Process.Pid
}

// TestImage builds the image and proves two rows of docs/containers.md in
// real containers watching a Go program on the host (--pid=host, uid 0,
// every capability dropped but the row's): inspect with CAP_SYS_PTRACE
// reads the program's Go version, and without it reads no executable and
// says at start that CAP_SYS_PTRACE is missing; profile with CAP_PERFMON
// samples kernel stacks, and without it fails naming CAP_PERFMON. The
// image is under 20 MB and runs as nobody unless told otherwise.
func TestImage(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman)
	tag := buildImage(t)
	out, _, err := podman("image", "inspect", "--format", "{{.Size}} {{.Config.User}}", tag)
	if err != nil {
		t.Fatal(err)
	}
	var size int
	var user string
	fmt.Sscan(out, &size, &user)
	t.Logf("image %s: %.1f MB, user %s", tag, float64(size)/1e6, user)
	if size <= 0 || size > 20e6 || user != "65534:65534" {
		t.Errorf("image of %d bytes, user %q: want under 20 MB and 65534:65534", size, user)
	}
	pid := strconv.Itoa(startPatient(t))
	run := func(caps string, args ...string) (string, string, error) {
		a := []string{"run", "--rm", "--pid=host", "--user", "0", "--cap-drop=all", "--security-opt", "seccomp=unconfined"}
		if caps != "" {
			a = append(a, "--cap-add="+caps)
		}
		return podman(append(append(a, tag), args...)...)
	}

	stdout, stderr, err := run("SYS_PTRACE", "inspect", "--pid", pid, "--duration", "500ms")
	if err != nil || !strings.Contains(stdout, "go1.") || strings.Contains(stderr, "CAP_SYS_PTRACE") {
		t.Errorf("inspect with CAP_SYS_PTRACE: %v\n%s\n%s", err, stdout, stderr)
	}
	stdout, stderr, err = run("", "inspect", "--pid", pid, "--duration", "500ms")
	if err != nil || !strings.Contains(stdout, "executable unreadable") || !strings.Contains(stderr, "without CAP_SYS_PTRACE") {
		t.Errorf("inspect without CAP_SYS_PTRACE: %v\n%s\n%s", err, stdout, stderr)
	}

	stdout, stderr, err = run("PERFMON", "profile", "--pid", pid, "--duration", "1s", "--format", "json", "-o", "/dev/null")
	var p struct {
		UserOnly bool `json:"user_only"`
	}
	if err != nil || json.Unmarshal([]byte(stdout), &p) != nil || p.UserOnly {
		t.Errorf("profile with CAP_PERFMON: %v, user only %v\n%s\n%s", err, p.UserOnly, stdout, stderr)
	}
	_, stderr, err = run("", "profile", "--pid", pid, "--duration", "1s", "--format", "json", "-o", "/dev/null")
	if err == nil || !strings.Contains(stderr, "without CAP_PERFMON") || !strings.Contains(stderr, "grant CAP_PERFMON") {
		t.Errorf("profile without CAP_PERFMON: %v\n%s", err, stderr)
	}
}
