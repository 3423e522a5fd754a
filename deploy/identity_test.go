package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// containerJSON is the container object every command's JSON carries.
type containerJSON struct {
	Runtime string `json:"runtime"`
	ID      string `json:"id"`
	Source  string `json:"source"`
}

// TestContainerIdentity: gosleuth on the host names the podman container
// a Go program runs in, by runtime and short ID, in the doctor's process
// line (with the container's name and image) and JSON, inspect's process
// line (with the name, image and the program's PID inside its namespace)
// and JSON, and top's record and table; a program on the host is named in
// none.
func TestContainerIdentity(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Podman)
	bin := testbin.Build(t, "../cmd/gosleuth")
	pid, id := containerPatientID(t)
	host := startPatient(t, os.Getuid())
	short := id[:12]
	want := containerJSON{Runtime: "podman", ID: id, Source: "cgroup"}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("gosleuth %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	p := strconv.Itoa(pid)

	var d struct {
		Processes []struct {
			PID       int            `json:"pid"`
			Container *containerJSON `json:"container"`
		} `json:"processes"`
	}
	out := run("doctor", "--pid", p+","+strconv.Itoa(host), "--duration", "1s", "--max-looks", "0", "--format", "json")
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Processes) != 2 {
		t.Fatalf("doctor JSON: %v\n%s", err, out)
	}
	for _, pr := range d.Processes {
		switch {
		case pr.PID == pid && (pr.Container == nil || *pr.Container != want):
			t.Errorf("doctor JSON of the containerised program: container %+v, want %+v", pr.Container, want)
		case pr.PID == host && pr.Container != nil:
			t.Errorf("doctor JSON of the program on the host: container %+v, want none", pr.Container)
		}
	}
	// The doctor adds the names podman's store gives for the processes it
	// reports.
	named := "container podman " + short + " name " + patient.name + " image " + patient.tag
	if out := run("doctor", "--pid", p, "--duration", "1s", "--max-looks", "0"); !strings.Contains(out, p+" patient") || !strings.Contains(out, "["+named+"]") {
		t.Errorf("doctor's process line does not name [%s]:\n%s", named, out)
	}

	out = run("inspect", "--pid", p, "--duration", "300ms")
	line, _, _ := strings.Cut(out, "\n")
	// inspect reads the container through the process's facts, which add
	// the names podman's store gives (top's come from the cgroup path
	// alone).
	if !strings.HasPrefix(line, "process") || !strings.Contains(line, named) || !strings.Contains(line, "PID 1 in its namespace") {
		t.Errorf("inspect's process line: %q, want %q and PID 1 inside", line, named)
	}
	var in struct {
		Facts struct {
			NSPID     int            `json:"nspid"`
			Container *containerJSON `json:"container"`
		} `json:"facts"`
	}
	out = run("inspect", "--pid", p, "--duration", "300ms", "--format", "json")
	if err := json.Unmarshal([]byte(out), &in); err != nil || in.Facts.Container == nil || *in.Facts.Container != want || in.Facts.NSPID != 1 {
		t.Errorf("inspect JSON: %v, facts %+v, want container %+v and nspid 1", err, in.Facts, want)
	}
	if out := run("inspect", "--pid", strconv.Itoa(host), "--duration", "300ms"); strings.Contains(out, "container ") {
		t.Errorf("inspect names a container for a program on the host:\n%s", out)
	}

	var tp struct {
		Processes []struct {
			Container *containerJSON `json:"container"`
		} `json:"processes"`
	}
	out = run("top", "--once", "--format", "json", "--interval", "200ms", "--pid", p)
	if err := json.Unmarshal([]byte(out), &tp); err != nil || len(tp.Processes) != 1 || tp.Processes[0].Container == nil || *tp.Processes[0].Container != want {
		t.Errorf("top JSON: %v\n%s", err, out)
	}
	if out := run("top", "--once", "--interval", "200ms", "--pid", p); !strings.Contains(out, "["+short+"] ") {
		t.Errorf("top's table does not tag the command with [%s]:\n%s", short, out)
	}
}
