package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// namedContainer is the container object of a command's JSON with the
// names podman's store gives.
type namedContainer struct {
	Runtime string `json:"runtime"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Image   string `json:"image"`
}

// gosleuth runs the gosleuth binary and returns its standard output,
// failing t with its standard error when it fails.
func gosleuth(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gosleuth %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestHostToolsNameContainer: gosleuth on the host profiles, probes and
// shows on the dashboard a Go program in a podman container, and each
// names the container as podman knows it (runtime, short ID, name and
// image, the last two from podman's own store) with the program's PID 1
// inside: profile's text, JSON and pprof file (a comment, and labels on
// every sample), the same for its heap profile, probe's text and JSON,
// the dashboard's process state and its list's command column.
func TestHostToolsNameContainer(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman, testenv.Perf, testenv.BPF)
	bin := testbin.Build(t, "../cmd/gosleuth")
	pid, id := containerPatientID(t)
	p := strconv.Itoa(pid)
	want := namedContainer{Runtime: "podman", ID: id, Name: patient.name, Image: patient.tag}
	line := fmt.Sprintf("container podman %s name %s image %s, PID 1 in its namespace", id[:12], patient.name, patient.tag)
	type withContainer struct {
		Container *namedContainer `json:"container"`
		NSPID     int             `json:"nspid"`
	}
	checkJSON := func(what, out string) {
		t.Helper()
		var v withContainer
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Container == nil || *v.Container != want || v.NSPID != 1 {
			t.Errorf("%s: %v, container %+v nspid %d, want %+v and 1", what, err, v.Container, v.NSPID, want)
		}
	}
	checkLine := func(what, out string) {
		t.Helper()
		if !slices.Contains(strings.Split(out, "\n"), line) {
			t.Errorf("%s has no line %q:\n%s", what, line, out)
		}
	}

	t.Run("profile", func(t *testing.T) {
		pb := filepath.Join(t.TempDir(), "p.pb.gz")
		// At 997 Hz the ticker's 1-2% of a CPU gives some 20 samples a
		// second.
		checkLine("profile's summary", gosleuth(t, bin, "profile", "--pid", p, "--duration", "1s", "--hz", "997", "-o", pb))
		prof := testbin.ReadPprof(t, pb)
		if !slices.Contains(prof.Comments, line) {
			t.Errorf("pprof comments %q, want %q", prof.Comments, line)
		}
		if len(prof.Sample) == 0 {
			t.Fatal("no samples in 1 s of the patient at 997 Hz")
		}
		for _, s := range prof.Sample {
			if !slices.Equal(s.Label["container"], []string{id[:12]}) || !slices.Equal(s.Label["container_image"], []string{patient.tag}) {
				t.Fatalf("a sample's labels %v, want container %s and its image", s.Label, id[:12])
			}
		}
		t.Logf("pprof: %d samples labelled container=%s", len(prof.Sample), id[:12])
		checkJSON("profile's JSON", gosleuth(t, bin, "profile", "--pid", p, "--duration", "1s", "--format", "json"))
	})

	// The allocation profile, read from the program's memory across its
	// mount namespace.
	t.Run("heap", func(t *testing.T) {
		pb := filepath.Join(t.TempDir(), "heap.pb.gz")
		checkLine("the heap profile's text", gosleuth(t, bin, "profile", "--type", "heap", "--pid", p, "-o", pb))
		prof := testbin.ReadPprof(t, pb)
		if !slices.Contains(prof.Comments, line) {
			t.Errorf("the heap profile's comments %q, want %q", prof.Comments, line)
		}
		checkJSON("the heap profile's JSON", gosleuth(t, bin, "profile", "--type", "heap", "--pid", p, "--format", "json"))
	})

	t.Run("probe", func(t *testing.T) {
		out := gosleuth(t, bin, "probe", "--pid", p, "--duration", "500ms", "--recipe", "timers")
		checkLine("probe's text", out)
		if !strings.Contains(out, "runtime.chanrecv2") {
			t.Errorf("probe saw no channel receives of the ticker:\n%s", out)
		}
		checkJSON("probe's JSON", gosleuth(t, bin, "probe", "--pid", p, "--duration", "500ms", "--recipe", "timers", "--format", "json"))
	})

	t.Run("web", func(t *testing.T) {
		get := dashboard(t)
		var h struct {
			State struct {
				withContainer
				Text string `json:"container_text"`
			} `json:"state"`
		}
		get("/api/history?pid="+p, &h)
		if c := h.State.Container; c == nil || *c != want || h.State.NSPID != 1 || "container "+h.State.Text+", PID 1 in its namespace" != line {
			t.Errorf("the dashboard's state: container %+v %q, nspid %d; want %+v, 1", c, h.State.Text, h.State.NSPID, want)
		}
		var l struct {
			Cols []string `json:"cols"`
			Rows [][]any  `json:"rows"`
		}
		get("/api/procs", &l)
		cmd := slices.Index(l.Cols, "command")
		for _, r := range l.Rows {
			if n, _ := r[0].(float64); int(n) == pid {
				if c, _ := r[cmd].(string); !strings.HasPrefix(c, "["+id[:12]+"] ") {
					t.Errorf("the list's command %q, want it tagged [%s]", c, id[:12])
				}
				return
			}
		}
		t.Errorf("the containerised patient %d is not in the dashboard's list", pid)
	})
}

// sameRows are the commands whose conclusions about the same program
// must not depend on whether it runs in a container: each gives, from its
// JSON, the words compared between the two sides.
var sameRows = []struct {
	command string
	args    []string
	read    func(out []byte) (string, error)
}{
	{"doctor", []string{"doctor", "--duration", "3s", "--format", "json"}, func(out []byte) (string, error) {
		var d struct {
			Processes []struct {
				Findings []struct {
					ID string `json:"id"`
				} `json:"findings"`
			} `json:"processes"`
		}
		if err := json.Unmarshal(out, &d); err != nil || len(d.Processes) != 1 {
			return "", fmt.Errorf("%d processes, %v", len(d.Processes), err)
		}
		var ids []string
		for _, f := range d.Processes[0].Findings {
			ids = append(ids, f.ID)
		}
		slices.Sort(ids)
		return strings.Join(ids, " "), nil
	}},
	{"inspect", []string{"inspect", "--duration", "500ms", "--format", "json"}, func(out []byte) (string, error) {
		var in struct {
			Facts struct {
				GoVersion  string `json:"go_version"`
				GOMAXPROCS int    `json:"gomaxprocs"`
			} `json:"facts"`
			Source string `json:"source"`
		}
		err := json.Unmarshal(out, &in)
		return fmt.Sprintf("%s GOMAXPROCS %d, runtime from %s", in.Facts.GoVersion, in.Facts.GOMAXPROCS, in.Source), err
	}},
	// The ticker's receives, about 900 a second here, wherever it runs
	// (over 100 even when the host is busy enough to merge ticks).
	{"probe", []string{"probe", "--duration", "1s", "--recipe", "timers", "--format", "json"}, func(out []byte) (string, error) {
		var pr struct {
			Functions []struct {
				Func  string `json:"func"`
				Count int    `json:"count"`
			} `json:"functions"`
		}
		if err := json.Unmarshal(out, &pr); err != nil {
			return "", err
		}
		var hot []string
		for _, f := range pr.Functions {
			if f.Count > 100 {
				hot = append(hot, f.Func)
			}
		}
		slices.Sort(hot)
		return strings.Join(hot, " "), nil
	}},
	// The two syscalls the ticker and its netpoller make most.
	{"syscalls", []string{"syscalls", "--duration", "1s", "--format", "json"}, func(out []byte) (string, error) {
		var s struct {
			Mode     string `json:"mode"`
			Syscalls []struct {
				Name string `json:"name"`
			} `json:"syscalls"`
		}
		if err := json.Unmarshal(out, &s); err != nil || len(s.Syscalls) < 2 {
			return "", fmt.Errorf("%d syscalls, %v", len(s.Syscalls), err)
		}
		top := []string{s.Syscalls[0].Name, s.Syscalls[1].Name}
		slices.Sort(top)
		return s.Mode + ": " + strings.Join(top, " "), nil
	}},
}

// TestSameFindings runs each command of sameRows on the same patient (the
// 1 ms ticker with the agent) on the host and in a podman container, one
// after the other, and wants the same conclusions from both: the doctor's
// finding IDs, inspect's Go version, GOMAXPROCS and runtime source, the
// functions probes see called, the syscalls counted most. The table of
// both sides is logged.
func TestSameFindings(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman, testenv.Perf, testenv.BPF)
	bin := testbin.Build(t, "../cmd/gosleuth")
	inside := containerPatient(t)
	host := startPatient(t, os.Getuid(), "PATIENT_AGENT=1")
	time.Sleep(500 * time.Millisecond) // the host side's agent, as the container's had
	var table strings.Builder
	fmt.Fprintf(&table, "%-9s %-50s %s\n", "command", "host", "container")
	for _, row := range sameRows {
		t.Run(row.command, func(t *testing.T) {
			var got [2]string
			for i, pid := range []int{host, inside} {
				args := append(slices.Clone(row.args), "--pid", strconv.Itoa(pid))
				v, err := row.read([]byte(gosleuth(t, bin, args...)))
				if err != nil || v == "" {
					t.Fatalf("%s of %d: %q %v", row.command, pid, v, err)
				}
				got[i] = v
			}
			fmt.Fprintf(&table, "%-9s %-50s %s\n", row.command, got[0], got[1])
			if got[0] != got[1] {
				t.Errorf("%s: host %q, container %q", row.command, got[0], got[1])
			}
		})
	}
	t.Logf("the same patient on the host (%d) and in a container (%d):\n%s", host, inside, table.String())
}

// TestPrometheusContainerGroups: the exporter on the host, scraped by
// Debian's Prometheus every second, gives the containerised patient a
// group of its own (group_kind="container", group="libpod/<short ID>"),
// which Prometheus' HTTP API returns with the patient's Go version and
// wake-up rate.
func TestPrometheusContainerGroups(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman, testenv.Prometheus)
	bin := testbin.Build(t, "../cmd/gosleuth")
	_, id := containerPatientID(t)
	addr := freeAddr(t)
	exp := exec.Command(bin, "exporter", "--listen", addr, "--interval", "500ms", "--doctor-every", "0")
	var expErr strings.Builder
	exp.Stderr = &expErr
	if err := exp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { exp.Process.Kill(); exp.Wait() }()

	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gosleuth\n    static_configs:\n      - targets: [%q]\n", addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	prom := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	var promOut strings.Builder
	prom.Stdout, prom.Stderr = &promOut, &promOut
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prom.Process.Kill(); prom.Wait() }()

	group := "libpod/" + id[:12]
	query := func(q string) []map[string]string {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" {
			return nil
		}
		var out []map[string]string
		for _, s := range r.Data.Result {
			out = append(out, s.Metric)
		}
		return out
	}
	t0 := time.Now()
	for _, q := range []string{
		`gosleuth_group_go_processes{group_kind="container", group="` + group + `"} == 1`,
		`rate(gosleuth_group_wakeups_total{group_kind="container", group="` + group + `"}[5s]) > 500`,
	} {
		deadline := time.Now().Add(60 * time.Second)
		var series []map[string]string
		for series = query(q); len(series) == 0; series = query(q) {
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus never answered %s with a series\nexporter: %s\nprometheus: %s", q, expErr.String(), tail(promOut.String(), 2000))
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("after %.1f s Prometheus has %s: %v", time.Since(t0).Seconds(), q, series[0])
		if series[0]["job"] != "gosleuth" {
			t.Errorf("series %v: not scraped by the gosleuth job", series[0])
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
