package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func TestDoctorUsage(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		words string
	}{
		{"zero duration", []string{"doctor", "--duration", "0s"}, "must be positive"},
		{"huge duration", []string{"doctor", "--duration", "5h"}, "at most 1h"},
		{"malformed duration", []string{"doctor", "--duration", "soon"}, "invalid value"},
		{"bad format", []string{"doctor", "--format", "xml"}, "text, json or markdown"},
		{"bad pid", []string{"doctor", "--pid", "x"}, `invalid pid "x"`},
		{"stray argument", []string{"doctor", "123"}, "takes no arguments"},
		{"url without one pid", []string{"doctor", "--pprof-url", "http://127.0.0.1:1/"}, "exactly one --pid"},
		{"too short for the close looks", []string{"doctor", "--pid", "1", "--duration", "1s"}, "too short for the close looks (syscall counts, stacks, runtime, probes), which decide the causes: give at least 2s with --pid"},
		{"too short on the whole host", []string{"doctor", "--duration", "3s"}, "give at least 4s on the whole host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errb)
			var u usageError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.words) {
				t.Fatalf("err %v, want a usage error with %q", err, tt.words)
			}
		})
	}
}

func TestDoctorNotFound(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	_, stderr, code := runChild(t, os.Args[0], nil, "doctor", "--pid", "536870000", "--duration", "2s")
	if code != 1 || !strings.Contains(stderr, "536870000") || !strings.Contains(stderr, "not found") {
		t.Errorf("code %d stderr %q", code, stderr)
	}
}

// TestDoctorReport runs the doctor on a sleeping child and checks the JSON
// report written with -o has the documented shape and names the process.
func TestDoctorReport(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	pid := strconv.Itoa(sleeper.Process.Pid)
	// --fail-on warn passes: a sleeping process has nothing to report.
	_, stderr, code := runChild(t, os.Args[0], nil, "doctor", "--pid", pid, "--duration", "2s", "--format", "json", "-o", out, "--fail-on", "warn")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Host struct {
			CPUs int `json:"cpus"`
		} `json:"host"`
		Processes []struct {
			PID      int               `json:"pid"`
			Comm     string            `json:"comm"`
			Findings []json.RawMessage `json:"findings"`
		} `json:"processes"`
		Unchecked []json.RawMessage `json:"unchecked"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, b)
	}
	if rep.Host.CPUs < 1 || len(rep.Processes) != 1 || rep.Processes[0].PID != sleeper.Process.Pid || rep.Processes[0].Comm != "sleep" {
		t.Fatalf("unexpected report: %s", b)
	}
	if len(rep.Processes[0].Findings) != 0 {
		t.Errorf("a sleeping process has findings: %s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left next to the report: %v", entries)
	}

	// An unwritable -o fails before observing anything.
	_, stderr, code = runChild(t, os.Args[0], nil, "doctor", "--pid", pid, "--duration", "1h", "-o", "/nonexistent/dir/r.json")
	if code != 1 || !strings.Contains(stderr, "cannot write") {
		t.Errorf("unwritable output: code %d stderr %q", code, stderr)
	}
}

// TestDoctorFailOn runs the doctor with --fail-on warn on a 1 ms ticker:
// the idle-wakeups warning makes it exit with status 3 (a deploy gate),
// the report still written.
func TestDoctorFailOn(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "../../internal/doctor/testdata/patient")
	p := exec.Command(bin, "ticker")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	stdout, stderr, code := runChild(t, os.Args[0], nil, "doctor", "--pid", strconv.Itoa(p.Process.Pid), "--duration", "3s", "--fail-on", "warn")
	if code != 3 || !strings.Contains(stdout, "idle-wakeups") || !strings.Contains(stderr, "finding(s) at warn or above") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestDoctorFreshMachine runs the doctor as root where tracefs is not
// mounted (a fresh machine), in a mount namespace of its own: the doctor
// mounts it, says so, and counts the syscalls; where tracefs cannot be
// mounted at all, re-opened files are still found, from kernel stack
// samples, instead of "not checked".
func TestDoctorFreshMachine(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.Tracefs, testenv.Perf)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testenv.Missing(t, testenv.Root, "no unshare(1) to make a mount namespace")
	}
	bin := testbin.Build(t, "../../internal/doctor/testdata/unseen")
	p := exec.Command(bin, "rereadconfig")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	time.Sleep(300 * time.Millisecond)
	// Without tracefs the reopen rule rests on exact probe counts of
	// os.OpenFile where entry uprobes work, else on kernel stack samples.
	impossibleSource, impossibleConfidence := "stacks", "low"
	if testenv.Has(testenv.BPF) && testenv.Has(testenv.Uprobes) {
		impossibleSource, impossibleConfidence = "probes", "high"
	}
	for _, tc := range []struct {
		name string
		// setup runs in the namespace before the doctor.
		setup      string
		note       string
		source     string
		confidence string
	}{
		{"tracefs not mounted", "umount /sys/kernel/tracing; umount /sys/kernel/debug/tracing", "gosleuth mounted it", "syscalls", "high"},
		{"tracefs impossible", "umount /sys/kernel/tracing; umount /sys/kernel/debug/tracing; mount -t tmpfs -o ro,size=1m none /sys/kernel", "tracefs not mounted", impossibleSource, impossibleConfidence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", tc.setup+` 2>/dev/null; exec "$0" -test.run='^$'`, os.Args[0])
			cmd.Env = append(os.Environ(), "GOSLEUTH_CLI_ARGS="+strings.Join([]string{"doctor", "--pid", strconv.Itoa(p.Process.Pid), "--duration", "6s", "--format", "json"}, "\n"))
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s", err, errb.String())
			}
			var rep struct {
				Processes []struct {
					Findings []struct {
						ID, Confidence string
						Sources        []string
					}
				}
				Unchecked []struct{ Rule string }
				Notes     []string
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if !strings.Contains(strings.Join(rep.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", rep.Notes, tc.note)
			}
			for _, u := range rep.Unchecked {
				if u.Rule == "file-reopen-churn" {
					t.Errorf("file-reopen-churn not checked")
				}
			}
			found := false
			for _, p := range rep.Processes {
				for _, f := range p.Findings {
					if f.ID == "file-reopen-churn" {
						found = true
						if !slices.Contains(f.Sources, tc.source) || f.Confidence != tc.confidence {
							t.Errorf("file-reopen-churn from %v at %s confidence, want from %s at %s", f.Sources, f.Confidence, tc.source, tc.confidence)
						}
					}
				}
			}
			if !found {
				t.Errorf("no file-reopen-churn:\n%s", out.String())
			}
		})
	}
}

// TestDoctorCPUWithoutLooks: the doctor reports a 1 ms ticker's CPU as it
// is with nothing of gosleuth attached, not raised by its own syscall
// tracepoints, stack sampler and probes: within 30% of the CPU the ticker
// used over windows before and after the doctor's run, with nothing
// attached, with --pid and on the whole host (where triage picks the
// ticker for a close look on a quiet machine), and a note says so.
func TestDoctorCPUWithoutLooks(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.Tracefs, testenv.Perf)
	bin := testbin.Build(t, "../../internal/doctor/testdata/patient")
	p := exec.Command(bin, "ticker")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	pid := p.Process.Pid
	time.Sleep(300 * time.Millisecond)
	quiet := func() float64 { // cores over 3 s, nothing attached
		a, t0 := taskCPU(t, pid), time.Now()
		time.Sleep(3 * time.Second)
		return (taskCPU(t, pid) - a) / time.Since(t0).Seconds()
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"pid", []string{"doctor", "--pid", strconv.Itoa(pid), "--duration", "6s", "--format", "json"}},
		{"whole host", []string{"doctor", "--duration", "8s", "--format", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := quiet()
			a, t0 := taskCPU(t, pid), time.Now()
			stdout, stderr, code := runChild(t, os.Args[0], nil, tc.args...)
			during := (taskCPU(t, pid) - a) / time.Since(t0).Seconds()
			after := quiet()
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var rep struct {
				Processes []struct {
					PID     int      `json:"pid"`
					CPUPct  float64  `json:"cpu_pct"`
					Sources []string `json:"sources"`
				} `json:"processes"`
				Notes []string `json:"notes"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, stdout)
			}
			i := slices.IndexFunc(rep.Processes, func(p struct {
				PID     int      `json:"pid"`
				CPUPct  float64  `json:"cpu_pct"`
				Sources []string `json:"sources"`
			}) bool {
				return p.PID == pid
			})
			if i < 0 {
				t.Logf("the report has no finding on the ticker (other processes took the looks): nothing to compare\n%s", stdout)
				return
			}
			ref := 100 * (before + after) / 2
			got := rep.Processes[i].CPUPct
			t.Logf("ticker CPU with nothing attached %.2f%% and %.2f%% of a core, over the doctor's run %.2f%%; the doctor reports %.2f%% (ratio to nothing attached %.2f); sources %v",
				100*before, 100*after, 100*during, got, got/ref, rep.Processes[i].Sources)
			if got < 0.7*ref || got > 1.3*ref {
				t.Errorf("the doctor reports %.2f%% of a core, the ticker uses %.2f%% with nothing attached", got, ref)
			}
			note := fmt.Sprintf("CPU of pid %d: ", pid)
			looked := len(rep.Processes[i].Sources) > 1
			if looked && !strings.Contains(strings.Join(rep.Notes, "\n"), note) {
				t.Errorf("no note says how the CPU was measured: %q", rep.Notes)
			}
		})
	}
}

// taskCPU is the CPU seconds process pid's threads have run (the sum of
// their schedstat run times).
func taskCPU(t *testing.T, pid int) float64 {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("pid %d has no threads: %v", pid, err)
	}
	var ns float64
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue // a thread that exited
		}
		var run float64
		fmt.Sscan(string(b), &run)
		ns += run
	}
	return ns / 1e9
}
