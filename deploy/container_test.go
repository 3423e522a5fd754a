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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/tracefs"
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

// The image is built once per test binary (TestMain removes it).
var (
	imageOnce sync.Once
	imageTag  string
	imageErr  error
)

// buildImage builds the image with build-image.sh under a tag of this
// test binary's own, once, and returns the tag.
func buildImage(t *testing.T) string {
	t.Helper()
	imageOnce.Do(func() {
		tag := fmt.Sprintf("localhost/gosleuth-test:%d", os.Getpid())
		out, err := exec.Command("./build-image.sh", tag).CombinedOutput()
		if err != nil {
			imageErr = fmt.Errorf("build-image.sh: %v\n%s", err, out)
			return
		}
		imageTag = tag
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageTag
}

func TestMain(m *testing.M) {
	code := m.Run()
	removePatient()
	if imageTag != "" {
		podman("rmi", "-f", imageTag)
	}
	testbin.Cleanup()
	os.Exit(code)
}

// startPatient starts the 1 ms ticker patient on the host, as user uid,
// with env added to this process's environment, and returns its PID.
func startPatient(t *testing.T, uid int, env ...string) int {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "../internal/web/testdata/patient"))
	cmd.Env = append(os.Environ(), env...)
	if uid != os.Getuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
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

// TestImage builds the image: under 20 MB, and run as nobody unless told
// otherwise.
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
	stdout, stderr, err := podman("run", "--rm", tag, "version")
	if err != nil || !strings.Contains(stdout, "gosleuth") {
		t.Errorf("gosleuth version in the image: %v\n%s%s", err, stdout, stderr)
	}
}

// result is one run of a command in a container.
type result struct {
	stdout, stderr string
	err            error
}

// jsonOut decodes the run's standard output into v, or says why not.
func (r result) jsonOut(v any) string {
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		return fmt.Sprintf("output is not JSON (%v): %s", err, r.stdout)
	}
	return ""
}

// doctorSources returns the doctor's sources for its one process.
func doctorSources(r result) ([]string, string) {
	var d struct {
		Processes []struct {
			Sources []string `json:"sources"`
		} `json:"processes"`
	}
	if why := r.jsonOut(&d); why != "" {
		return nil, why
	}
	if len(d.Processes) != 1 {
		return nil, fmt.Sprintf("%d processes in the report", len(d.Processes))
	}
	return d.Processes[0].Sources, ""
}

// topProcess returns top's record of its one process.
func topProcess(r result) (goVersion *string, fds *int, why string) {
	var d struct {
		Processes []struct {
			GoVersion *string `json:"go_version"`
			FDs       *int    `json:"fds"`
		} `json:"processes"`
	}
	if why := r.jsonOut(&d); why != "" {
		return nil, nil, why
	}
	if len(d.Processes) != 1 {
		return nil, nil, fmt.Sprintf("%d processes in the record", len(d.Processes))
	}
	return d.Processes[0].GoVersion, d.Processes[0].FDs, ""
}

// check says "" when a run shows what it should, else what it showed.
type check func(r result) string

func sourcesCheck(want bool, source string) check {
	return func(r result) string {
		src, why := doctorSources(r)
		if why == "" && slices.Contains(src, source) != want {
			why = fmt.Sprintf("sources %v: %s present %v, want %v", src, source, !want, want)
		}
		return why
	}
}

// capRows are the rows of docs/containers.md proven here: each command
// with its row's capabilities works, and with each one less loses what the
// row says and names the missing capability at start. args gets the PIDs
// of a Go program owned by root and of one owned by nobody.
var capRows = []struct {
	command string
	args    func(root, other string) []string
	works   check
	lost    map[string]check
}{
	{"top", func(_, other string) []string {
		return []string{"top", "--once", "--format", "json", "--interval", "200ms", "--pid", other}
	}, func(r result) string {
		gv, fds, why := topProcess(r)
		if why == "" && (gv == nil || fds == nil) {
			why = fmt.Sprintf("go version %v, fds %v: want both", gv != nil, fds != nil)
		}
		return why
	}, map[string]check{
		"SYS_PTRACE": func(r result) string {
			gv, _, why := topProcess(r)
			if why == "" && gv != nil {
				why = "Go version read without CAP_SYS_PTRACE"
			}
			return why
		},
		"DAC_READ_SEARCH": func(r result) string {
			_, fds, why := topProcess(r)
			if why == "" && fds != nil {
				why = "another user's descriptors counted without CAP_DAC_READ_SEARCH"
			}
			return why
		},
	}},
	{"doctor", func(root, _ string) []string {
		return []string{"doctor", "--pid", root, "--duration", "2s", "--format", "json"}
	}, func(r result) string {
		for _, s := range []string{"runtime", "stacks", "probes"} {
			if why := sourcesCheck(true, s)(r); why != "" {
				return why
			}
		}
		return ""
	}, map[string]check{
		"SYS_PTRACE": sourcesCheck(false, "runtime"),
		"PERFMON":    sourcesCheck(false, "probes"),
		"BPF":        sourcesCheck(false, "probes"),
	}},
	{"profile", func(root, _ string) []string {
		return []string{"profile", "--pid", root, "--duration", "1s", "--format", "json"}
	}, func(r result) string {
		var p struct {
			UserOnly bool `json:"user_only"`
		}
		if why := r.jsonOut(&p); why != "" || p.UserOnly {
			return fmt.Sprintf("user stacks only %v %s", p.UserOnly, why)
		}
		return ""
	}, map[string]check{
		"PERFMON": func(r result) string {
			if r.err == nil || !strings.Contains(r.stderr, "grant CAP_PERFMON") {
				return fmt.Sprintf("want a failure naming CAP_PERFMON, got %v", r.err)
			}
			return ""
		},
	}},
	{"syscalls", func(root, _ string) []string {
		// No --only: a count by name needs the exact mechanism, so
		// --only never falls back to /proc (it fails instead).
		return []string{"syscalls", "--pid", root, "--duration", "1s", "--format", "json"}
	}, func(r result) string {
		var s struct {
			Mode string `json:"mode"`
		}
		if why := r.jsonOut(&s); why != "" || !strings.HasPrefix(s.Mode, "exact") {
			return fmt.Sprintf("mode %q %s", s.Mode, why)
		}
		return ""
	}, map[string]check{
		"PERFMON": func(r result) string {
			var s struct {
				Mode   string `json:"mode"`
				Reason string `json:"reason"`
			}
			if why := r.jsonOut(&s); why != "" || s.Mode != "proc" || !strings.Contains(s.Reason, "CAP_PERFMON") {
				return fmt.Sprintf("mode %q, reason %q %s: want /proc's, naming CAP_PERFMON", s.Mode, s.Reason, why)
			}
			return ""
		},
	}},
	{"probe", func(root, _ string) []string {
		return []string{"probe", "--pid", root, "--duration", "500ms", "--recipe", "timers"}
	}, func(r result) string {
		if r.err != nil || !strings.Contains(r.stdout, "BPF uprobe") {
			return fmt.Sprintf("%v: want BPF uprobes", r.err)
		}
		return ""
	}, map[string]check{
		"SYS_PTRACE": failed, "PERFMON": failed, "BPF": failed,
	}},
	{"inspect", func(root, _ string) []string {
		return []string{"inspect", "--pid", root, "--duration", "500ms"}
	}, func(r result) string {
		if r.err != nil || !strings.Contains(r.stdout, "go1.") {
			return fmt.Sprintf("%v: no Go version", r.err)
		}
		return ""
	}, map[string]check{
		"SYS_PTRACE": func(r result) string {
			if !strings.Contains(r.stdout, "executable unreadable") {
				return "the executable was read"
			}
			return ""
		},
	}},
}

// failed is the check of a command that cannot work without the capability.
func failed(r result) string {
	if r.err == nil {
		return "it worked"
	}
	return ""
}

// TestCapabilityTable proves rows of docs/containers.md in real
// containers watching Go programs on the host (--pid=host, uid 0, every
// capability dropped but the row's, the host's tracefs mounted read-only,
// seccomp unconfined): with the row's capabilities the command works; with
// each one less it loses what the row says, and it names the missing
// capability at start in one line. The exporter's row is proven by
// TestExporterDaemonSet.
func TestCapabilityTable(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman)
	trace, err := tracefs.Root()
	if err != nil {
		t.Fatalf("tracefs on the host: %v", err)
	}
	tag := buildImage(t)
	root := strconv.Itoa(startPatient(t, os.Getuid()))
	other := strconv.Itoa(startPatient(t, 65534))
	for _, row := range capRows {
		t.Run(row.command, func(t *testing.T) {
			caps := tableCaps(t, row.command)
			run := func(without string) result {
				a := []string{"run", "--rm", "--pid=host", "--user", "0", "--cap-drop=all",
					"--security-opt", "seccomp=unconfined", "-v", trace + ":/sys/kernel/tracing:ro"}
				for _, c := range caps {
					if c != without {
						a = append(a, "--cap-add="+c)
					}
				}
				a = append(append(a, tag), row.args(root, other)...)
				stdout, stderr, err := podman(a...)
				return result{stdout, stderr, err}
			}
			r := run("")
			if why := row.works(r); why != "" {
				t.Errorf("with %v: %s\n%s", caps, why, r.stderr)
			}
			if strings.Contains(r.stderr, "running as root without") {
				t.Errorf("with %v, it says a capability is missing: %s", caps, r.stderr)
			}
			for _, c := range caps {
				lost, ok := row.lost[c]
				if !ok {
					t.Errorf("no check of what is lost without %s", c)
					continue
				}
				r := run(c)
				if why := lost(r); why != "" {
					t.Errorf("without %s: %s\n%s", c, why, r.stderr)
				}
				note := regexp.MustCompile(`(?m)^gosleuth: note: running as root without .*CAP_` + c + ` \(`)
				if !note.MatchString(r.stderr) {
					t.Errorf("without %s, no note naming it:\n%s", c, r.stderr)
				}
			}
		})
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
// again after settle.
func scrape(t *testing.T, addr string, seen *regexp.Regexp, settle time.Duration) string {
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
			time.Sleep(settle)
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
	startPatient(t, os.Getuid())
	fds := regexp.MustCompile(`gosleuth_group_open_fds\{group="patient",group_kind="exe"\} [1-9]`)
	goSeries := regexp.MustCompile(`gosleuth_group_go_processes\{go_version="go1\.[^"]+",group="patient",group_kind="exe"\} 1`)
	var goDelay time.Duration
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
		// The Go version of a process comes some samples after the
		// process: with CAP_SYS_PTRACE the test waits for it, without it
		// gives it as long as it took with.
		var m string
		if tc.wantGo {
			t0 := time.Now()
			m = scrape(t, addr, goSeries, 0)
			goDelay = time.Since(t0)
		} else {
			m = scrape(t, addr, fds, goDelay+2*time.Second)
		}
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
