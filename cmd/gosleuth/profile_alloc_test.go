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
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestProfileAllocBadUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad type", []string{"profile", "--pid", "1", "--type", "mutex"}, "cpu, heap or allocs"},
		{"no pid", []string{"profile", "--type", "heap"}, "give --pid PID"},
		{"command", []string{"profile", "--type", "allocs", "--", "true"}, "give --pid PID"},
		{"bad format", []string{"profile", "--pid", "1", "--type", "heap", "--format", "svg"}, "text, json or pprof"},
		{"zero window", []string{"profile", "--pid", "1", "--type", "allocs", "--duration", "0"}, "needs a window"},
		{"flame", []string{"profile", "--pid", "1", "--type", "heap", "--flame", "f.html"}, "for --type cpu"},
		{"src with cpu", []string{"profile", "--pid", "1", "--src", "."}, "--type heap or allocs"},
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

// allocPatient runs the allocation view's patient built with flags and
// returns its PID.
func allocPatient(t *testing.T, flags ...string) int {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	bin := testbin.BuildWith(t, "../../internal/allocview/testdata/allocs", append([]string{"-trimpath=false"}, flags...)...)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GOGC=10")
	return testbin.Start(t, cmd, testbin.Options{}).PID()
}

// TestProfileAllocsPprof: the allocs profile written with -o opens in go
// tool pprof, ranked by alloc_space with the patient's collector on top,
// and the text and JSON summaries name the window and the escape reasons.
func TestProfileAllocsPprof(t *testing.T) {
	pid := allocPatient(t)
	out := filepath.Join(t.TempDir(), "allocs.pb.gz")
	stdout, stderr, code := runChild(t, os.Args[0], nil, "profile", "--type", "allocs", "--pid", strconv.Itoa(pid),
		"--duration", "2s", "-o", out, "--src", "auto", "--top", "5")
	if code != 0 {
		t.Fatalf("code %d stderr %s", code, stderr)
	}
	for _, want := range []string{"as of the last completed GC", "bytes/s", "objects/s", "main.collect",
		string("growing append"), "interface boxing in fmt", "fix: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text lacks %q:\n%s", want, stdout)
		}
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, top)
	}
	text := string(top)
	if !strings.Contains(text, "Type: alloc_space") || !strings.Contains(text, "main.collect") {
		t.Errorf("go tool pprof -top:\n%s", text)
	}
	// The first ranked line is one of the patient's two big allocators
	// (a make of a run-time size, an append without pre-size).
	var first string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "%") && !strings.Contains(l, "flat%") && !strings.Contains(l, "Showing") {
			first = l
			break
		}
	}
	if f := strings.TrimSpace(first); !strings.HasSuffix(f, "main.collect") && !strings.HasSuffix(f, "main.scratch") {
		t.Errorf("first line of pprof -top %q, want main.collect or main.scratch", first)
	}

	stdout, stderr, code = runChild(t, os.Args[0], nil, "profile", "--type", "heap", "--pid", strconv.Itoa(pid), "--format", "pprof")
	if code != 0 {
		t.Fatalf("heap pprof: code %d stderr %s", code, stderr)
	}
	if p, err := profile.ParseData([]byte(stdout)); err != nil || p.DefaultSampleType != "inuse_space" || len(p.Sample) == 0 {
		t.Errorf("--format pprof on stdout: %v", err)
	}

	stdout, stderr, code = runChild(t, os.Args[0], nil, "profile", "--type", "heap", "--pid", strconv.Itoa(pid), "--format", "json")
	if code != 0 {
		t.Fatalf("heap: code %d stderr %s", code, stderr)
	}
	var r struct {
		Type  string `json:"type"`
		Rate  int64  `json:"rate"`
		Sites []struct {
			Func  string `json:"func"`
			Bytes int64  `json:"bytes"`
		} `json:"sites"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, stdout)
	}
	if r.Type != "heap" || r.Rate != 4096 || len(r.Sites) == 0 || r.Sites[0].Bytes <= 0 {
		t.Errorf("heap json %+v", r)
	}
}

// TestProfileAllocsOff: the live heap of a program whose linker turned
// memory profiling off gets one line saying so and why.
func TestProfileAllocsOff(t *testing.T) {
	pid := allocPatient(t, "-tags=noprof")
	start := time.Now()
	_, stderr, code := runChild(t, os.Args[0], nil, "profile", "--type", "heap", "--pid", strconv.Itoa(pid))
	if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "memory profiling is off") ||
		!strings.Contains(stderr, "references the heap profile") {
		t.Errorf("code %d stderr %q", code, stderr)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %s: refused after the window", d)
	}
}

// TestProfileAllocsSampled: with memory profiling off, --type allocs
// samples the allocator from outside, says so with the bias, and writes a
// pprof file go tool pprof opens.
func TestProfileAllocsSampled(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Uprobes)
	pid := allocPatient(t, "-tags=noprof")
	out := filepath.Join(t.TempDir(), "sampled.pb.gz")
	stdout, stderr, code := runChild(t, os.Args[0], nil, "profile", "--type", "allocs", "--pid", strconv.Itoa(pid),
		"--duration", "2s", "-o", out)
	if code != 0 {
		t.Fatalf("code %d stderr %s", code, stderr)
	}
	for _, want := range []string{"memory profiling is off in this binary: sampled from outside", "bias: ", "spans/s", "main."} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text lacks %q:\n%s", want, stdout)
		}
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", out).CombinedOutput()
	if err != nil || !strings.Contains(string(top), "Type: alloc_space") || !strings.Contains(string(top), "main.") {
		t.Errorf("go tool pprof -top: %v\n%s", err, top)
	}
}
