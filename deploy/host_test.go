package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/web"
)

// containerPatient returns the PID, as the host sees it, of the 1 ms
// ticker patient (with the agent) running in a FROM scratch container.
func containerPatient(t *testing.T) int {
	t.Helper()
	pid, _ := containerPatientID(t)
	return pid
}

// patient is the containerised patient the tests share: its image is
// built and its container started once per test binary (TestMain removes
// both); the tests only watch it.
var patient struct {
	once      sync.Once
	pid       int
	id        string // the container's full ID
	tag, name string // its image and name, as podman was given them
	err       error
}

// containerPatientID is containerPatient, also returning the container's
// full ID as podman prints it.
func containerPatientID(t *testing.T) (pid int, id string) {
	t.Helper()
	patient.once.Do(func() { patient.err = startContainerPatient() })
	if patient.err != nil {
		t.Fatal(patient.err)
	}
	return patient.pid, patient.id
}

func startContainerPatient() error {
	dir, err := os.MkdirTemp("", "gosleuth-patient")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "patient"), "../internal/web/testdata/patient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build patient: %v\n%s", err, out)
	}
	// The image has a /tmp (as distroless images do), where the agent
	// makes its socket's directory: in an image without one the agent
	// cannot start, and the runtime is then read from memory.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte("FROM scratch\nCOPY patient /patient\nCOPY tmp /tmp\nENTRYPOINT [\"/patient\"]\n"), 0o644); err != nil {
		return err
	}
	tag := fmt.Sprintf("localhost/gosleuth-patient-test:%d", os.Getpid())
	if _, stderr, err := podman("build", "--quiet", "-t", tag, dir); err != nil {
		return fmt.Errorf("podman build: %v\n%s", err, stderr)
	}
	patient.tag = tag
	name := fmt.Sprintf("gosleuth-patient-%d", os.Getpid())
	id, stderr, err := podman("run", "-d", "--name", name, "-e", "PATIENT_AGENT=1", tag)
	if err != nil {
		return fmt.Errorf("podman run: %v\n%s", err, stderr)
	}
	patient.id, patient.name = strings.TrimSpace(id), name
	out, _, err := podman("inspect", "--format", "{{.State.Pid}}", patient.id)
	pid, perr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || perr != nil || pid <= 0 {
		return fmt.Errorf("container's PID %q: %v %v", out, err, perr)
	}
	patient.pid = pid
	// Give the program its first ticks and its agent's socket.
	time.Sleep(500 * time.Millisecond)
	return nil
}

// removePatient removes the shared patient's container and image.
func removePatient() {
	if patient.id != "" {
		podman("rm", "-f", "-t", "0", patient.id)
	}
	if patient.tag != "" {
		podman("rmi", "-f", patient.tag)
	}
}

// dashboard starts gosleuth web's handler for the test (as root: every
// process) and returns a function that GETs a path of its API with the
// dashboard's token and decodes the JSON reply into v, failing t unless it
// is a 200.
func dashboard(t *testing.T) (get func(path string, v any)) {
	t.Helper()
	s, err := web.New(web.Config{Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ConnContext = s.ConnContext
	ts.Start()
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+s.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
	}
}

// doctorOf runs gosleuth doctor on pid and returns its sources and
// findings.
func doctorOf(t *testing.T, bin string, pid int) (sources, findings []string) {
	t.Helper()
	out, err := exec.Command(bin, "doctor", "--pid", strconv.Itoa(pid), "--duration", "3s", "--format", "json").Output()
	if err != nil {
		t.Fatalf("doctor --pid %d: %v", pid, err)
	}
	var d struct {
		Processes []struct {
			Sources  []string `json:"sources"`
			Findings []struct {
				ID string `json:"id"`
			} `json:"findings"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(out, &d); err != nil || len(d.Processes) != 1 {
		t.Fatalf("doctor --pid %d: %v\n%s", pid, err, out)
	}
	for _, f := range d.Processes[0].Findings {
		findings = append(findings, f.ID)
	}
	return d.Processes[0].Sources, findings
}

// TestHostWatchesContainer: gosleuth on the host diagnoses a Go program in
// a FROM scratch container as it diagnoses the same program on the host:
// the doctor finds the 1 ms ticker's idle wake-ups in both, with the
// runtime (the agent's socket inside the container), stack and probe
// sources in both; inspect reads the containerised program's Go version
// and its container's cgroup; the dashboard's history of it says it is a
// Go program with the agent's runtime source.
func TestHostWatchesContainer(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman, testenv.Perf, testenv.BPF)
	bin := testbin.Build(t, "../cmd/gosleuth")
	inside := containerPatient(t)
	host := startPatient(t, os.Getuid())
	for _, pid := range []int{host, inside} {
		src, found := doctorOf(t, bin, pid)
		for _, s := range []string{"proc", "stacks", "runtime", "probes"} {
			if !slices.Contains(src, s) {
				t.Errorf("doctor of %d (in a container %v): sources %v lack %s", pid, pid == inside, src, s)
			}
		}
		if !slices.Contains(found, "idle-wakeups") {
			t.Errorf("doctor of %d (in a container %v): findings %v, want idle-wakeups", pid, pid == inside, found)
		}
	}
	out, err := exec.Command(bin, "inspect", "--pid", strconv.Itoa(inside), "--duration", "500ms").Output()
	if err != nil || !strings.Contains(string(out), "go1.") || !strings.Contains(string(out), "libpod") {
		t.Errorf("inspect of the containerised program: %v\n%s", err, out)
	}

	get := dashboard(t)
	var h struct {
		State struct {
			IsGo    bool `json:"is_go"`
			Runtime struct {
				From string `json:"from"`
			} `json:"runtime"`
		} `json:"state"`
	}
	for end := time.Now().Add(15 * time.Second); h.State.Runtime.From == "" && time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		get("/api/history?pid="+strconv.Itoa(inside), &h)
	}
	if !h.State.IsGo || h.State.Runtime.From == "" {
		t.Errorf("the dashboard's state of the containerised program: %+v, want a Go program with a runtime source", h.State)
	}
}
