package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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

// daemonSetRun turns the DaemonSet's pod into podman run arguments: its
// user, read-only root, capabilities (less drop), seccomp profile, host PID
// namespace and host paths mounted as it mounts them; the host's network,
// so the test can scrape it, with --listen moved to addr.
func daemonSetRun(t *testing.T, ds *object, tag, addr, drop string) []string {
	t.Helper()
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	sc := c.SecurityContext
	a := []string{"run", "-d", "--network=host", "--user", strconv.Itoa(sc.RunAsUser)}
	if pod.HostPID {
		a = append(a, "--pid=host")
	}
	if sc.ReadOnlyRootFilesystem {
		a = append(a, "--read-only")
	}
	for _, d := range sc.Capabilities.Drop {
		a = append(a, "--cap-drop="+strings.ToLower(d))
	}
	for _, add := range sc.Capabilities.Add {
		if add != drop {
			a = append(a, "--cap-add="+add)
		}
	}
	if sc.SeccompProfile.Type == "Unconfined" {
		a = append(a, "--security-opt", "seccomp=unconfined")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		hostPaths[v.Name] = v.HostPath.Path
	}
	for _, m := range c.VolumeMounts {
		opt := ""
		if m.ReadOnly {
			opt = ":ro"
		}
		a = append(a, "-v", hostPaths[m.Name]+":"+m.MountPath+opt)
	}
	a = append(a, tag)
	for i := 0; i < len(c.Args); i++ {
		a = append(a, c.Args[i])
		if c.Args[i] == "--listen" && i+1 < len(c.Args) {
			a = append(a, addr)
			i++
		}
	}
	return a
}

// scrape reads the exporter's metrics at addr once they match seen, and
// again two samples later (what a sample learns of a new process, its Go
// version, may come with the next).
func scrape(t *testing.T, addr string, seen *regexp.Regexp) string {
	t.Helper()
	get := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if seen.MatchString(get()) {
			time.Sleep(2 * time.Second)
			return get()
		}
	}
	t.Fatalf("the exporter at %s did not show %s in 30 s", addr, seen)
	return ""
}

// freeAddr is a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestExporterDaemonSet runs the exporter in podman as the DaemonSet runs
// it (user, read-only root, the four capabilities and nothing else,
// seccomp, host PID namespace, the host's /proc and tracefs mounted
// read-only) and scrapes it: the Go patient on the host is seen with its
// Go version and descriptors, through the BPF task iterator. With
// CAP_SYS_PTRACE less (the exporter's row, one less), the Go version is
// gone and the exporter said at start that CAP_SYS_PTRACE is missing.
func TestExporterDaemonSet(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman)
	ds := daemonSet(t)
	tag := buildImage(t)
	startPatient(t)
	fds := regexp.MustCompile(`gosleuth_group_open_fds\{group="patient",group_kind="exe"\} [1-9]`)
	goSeries := regexp.MustCompile(`gosleuth_group_go_processes\{go_version="go1\.[^"]+",group="patient",group_kind="exe"\} 1`)
	for _, tc := range []struct {
		drop   string
		wantGo bool
	}{{"", true}, {"SYS_PTRACE", false}} {
		addr := freeAddr(t)
		id, stderr, err := podman(daemonSetRun(t, ds, tag, addr, tc.drop)...)
		if err != nil {
			t.Fatalf("start the exporter: %v\n%s", err, stderr)
		}
		id = strings.TrimSpace(id)
		m := scrape(t, addr, fds)
		stdout, stderr, _ := podman("logs", id)
		logs := stdout + stderr
		podman("rm", "-f", id)
		if goSeries.MatchString(m) != tc.wantGo {
			t.Errorf("without %q: the patient's Go version series present %v, want %v", tc.drop, !tc.wantGo, tc.wantGo)
		}
		if !fds.MatchString(m) {
			t.Errorf("without %q: no open descriptors for the patient", tc.drop)
		}
		if !strings.Contains(m, `gosleuth_exporter_ran_signal_info{reason="",source="bpf"} 1`) {
			t.Errorf("without %q: the exporter does not read through the BPF task iterator", tc.drop)
		}
		if note := strings.Contains(logs, "without CAP_SYS_PTRACE"); note != (tc.drop == "SYS_PTRACE") {
			t.Errorf("without %q: logs say CAP_SYS_PTRACE is missing: %v\n%s", tc.drop, note, logs)
		}
	}
}
