package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"

	"github.com/google/pprof/profile"
)

func TestProfileBadUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"profile"}, "either --pid PID or -- CMD"},
		{"both targets", []string{"profile", "--pid", "1", "--", "true"}, "either --pid PID or -- CMD"},
		{"bad format", []string{"profile", "--pid", "1", "--format", "xml"}, "text, json or pprof"},
		{"bad hz", []string{"profile", "--pid", "1", "--hz", "0"}, "--hz must be between"},
		{"negative duration", []string{"profile", "--pid", "1", "--duration", "-1s"}, "must not be negative"},
		{"negative pid", []string{"profile", "--pid", "-3"}, "invalid pid"},
		{"bad events", []string{"profile", "--pid", "1", "--events", "bpf"}, "auto, thread or cpu"},
		{"bad off-cpu-every", []string{"profile", "--pid", "1", "--off-cpu-every", "0"}, "at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, io.Discard, io.Discard)
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want a usage error with %q", err, tt.want)
			}
		})
	}
}

func needLinux(t *testing.T) {
	t.Helper()
	testenv.Require(t, testenv.Linux)
}

func TestProfileNotFound(t *testing.T) {
	needLinux(t)
	_, stderr, code := runChild(t, os.Args[0], nil, "profile", "--pid", "536870000", "--duration", "1s")
	if code != 1 || stderr != "gosleuth: process 536870000 not found\n" {
		t.Errorf("code %d stderr %q", code, stderr)
	}
}

// TestProfileUnwritableOutput fails at once, not after sampling.
func TestProfileUnwritableOutput(t *testing.T) {
	needLinux(t)
	start := time.Now()
	_, stderr, code := runChild(t, os.Args[0], nil, "profile", "--pid", strconv.Itoa(os.Getpid()),
		"--duration", "30s", "-o", "/nonexistent-dir/p.pb.gz")
	if code != 1 || !strings.Contains(stderr, "cannot write") {
		t.Errorf("code %d stderr %q", code, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s: the path was checked after sampling", d)
	}
}

// shellLoop is a short CPU-bound command that is not a Go program.
var shellLoop = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}

// TestProfileCommand profiles a command from its start until it exits and
// checks the pprof file and the JSON summary.
func TestProfileCommand(t *testing.T) {
	needLinux(t)
	if _, err := os.Stat(shellLoop[0]); err != nil {
		t.Fatalf("no /bin/sh: %v", err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "p.json")
	args := append([]string{"profile", "--duration", "0", "--format", "json", "-o", out,
		"--folded", filepath.Join(dir, "p.folded"), "--flame", filepath.Join(dir, "p.html"), "--"}, shellLoop...)
	stdout, stderr, code := runChild(t, os.Args[0], nil, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var s struct {
		Samples int64              `json:"samples"`
		Classes map[string]float64 `json:"classes"`
		Notes   []string           `json:"notes"`
	}
	// -o holds what --format names, as in every command; stdout stays empty.
	if stdout != "" {
		t.Errorf("stdout got %q with -o", stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("-o %s with --format json is not JSON: %v\n%.200q", out, err, b)
	}
	if s.Samples == 0 || len(s.Classes) == 0 {
		t.Errorf("summary %+v", s)
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "ended") {
		t.Errorf("notes %q do not say the command ended", s.Notes)
	}
	for _, f := range []string{"p.folded", "p.html"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func checkProfileFile(t *testing.T, path string) *profile.Profile {
	t.Helper()
	p := testbin.ReadPprof(t, path)
	if len(p.Sample) == 0 {
		t.Errorf("%s has no samples", path)
	}
	return p
}

// TestProfileExitMidway profiles a process that exits before the duration
// is over: the output is written, complete, and says so.
func TestProfileExitMidway(t *testing.T) {
	needLinux(t)
	if _, err := os.Stat(shellLoop[0]); err != nil {
		t.Fatalf("no /bin/sh: %v", err)
	}
	cmd := exec.Command(shellLoop[0], shellLoop[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	out := filepath.Join(t.TempDir(), "p.pb.gz")
	start := time.Now()
	stdout, stderr, code := runChild(t, os.Args[0], nil, "profile", "--pid", strconv.Itoa(cmd.Process.Pid),
		"--duration", "60s", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if time.Since(start) > 45*time.Second {
		t.Error("sampling did not stop when the process exited")
	}
	if !strings.Contains(stdout, "exited after") {
		t.Errorf("summary does not say the process exited:\n%s", stdout)
	}
	p := checkProfileFile(t, out)
	if len(p.Comments) == 0 {
		t.Error("profile carries no note")
	}
}

// TestProfileUnprivileged profiles a Go patient as user nobody: user-mode
// samples plus the synthetic kernel leaf, and a note.
func TestProfileUnprivileged(t *testing.T) {
	needLinux(t)
	testenv.Require(t, testenv.Nobody)
	dir, err := os.MkdirTemp("", "gosleuth-profile-unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	patient := filepath.Join(dir, "getppid")
	if out, err := exec.Command("go", "build", "-o", patient, "../../internal/stacks/testdata/getppid").CombinedOutput(); err != nil {
		t.Fatalf("build patient: %v\n%s", err, out)
	}
	bin := nobodyBinary(t)
	pc := exec.Command(patient)
	pc.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pc.Process.Kill(); pc.Wait() }()
	stdout, stderr, code := runChild(t, bin, nobody, "profile", "--pid", strconv.Itoa(pc.Process.Pid),
		"--duration", "2s", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var s struct {
		UserOnly    bool               `json:"user_only"`
		KernelShare float64            `json:"kernel_share"`
		Classes     map[string]float64 `json:"classes"`
		Notes       []string           `json:"notes"`
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, stdout)
	}
	if !s.UserOnly || len(s.Notes) == 0 || s.Classes["kernel time, not sampled"] < 0.3 {
		t.Errorf("user_only %v, kernel share %.2f, classes %v, notes %q", s.UserOnly, s.KernelShare, s.Classes, s.Notes)
	}
}
