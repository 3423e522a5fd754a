package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/probe"
	"github.com/gosleuth/gosleuth/internal/profileview"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestProbeBadInput: every bad command line gets one clear line and its
// exit status.
func TestProbeBadInput(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		code  int
		words string
	}{
		{"no pid", []string{"probe", "--recipe", "locks"}, 2, "give --pid"},
		{"nothing to probe", []string{"probe", "--pid", "1"}, 2, "give --recipe NAME or the functions"},
		{"unknown recipe", []string{"probe", "--pid", "1", "--recipe", "magic"}, 2, `unknown recipe "magic"`},
		{"bad budget", []string{"probe", "--pid", "1", "--budget", "lots", "main.f"}, 2, "--budget must be a percentage"},
		{"bad register", []string{"probe", "--pid", "1", "main.f:XMM0"}, 2, "AX, BX, CX or R14"},
		{"bad format", []string{"probe", "--pid", "1", "--format", "xml", "main.f"}, 2, "text or json"},
		{"bad attach", []string{"probe", "--pid", "1", "--attach", "kprobe", "main.f"}, 2, "auto, multi, perf or tracefs"},
		{"bad duration", []string{"probe", "--pid", "1", "--duration", "-1s", "main.f"}, 2, "--duration must be positive"},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, struct {
			name  string
			args  []string
			code  int
			words string
		}{"pid not found", []string{"probe", "--pid", "536870000", "main.f"}, 1, "process 536870000 not found"})
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, &out, &out)
			if code := exitCode(err, devNull); code != tt.code || err == nil || !strings.Contains(err.Error(), tt.words) {
				t.Errorf("exit %d (want %d), error %v (want %q)", code, tt.code, err, tt.words)
			}
		})
	}
}

// TestProbeNotGo: a target that is not a Go program is refused in one line.
func TestProbeNotGo(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF, testenv.Uprobes)
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	var out bytes.Buffer
	err := run(context.Background(), []string{"probe", "--pid", strconv.Itoa(p.Process.Pid), "--recipe", "timers"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "is not a Go program") || strings.Contains(err.Error(), "\n") {
		t.Errorf("probing sleep(1): %v", err)
	}
}

// TestProbeTextTooHot: a recipe whose function was too hot to probe is
// "not measured", never "nothing seen" right after the function's own
// "too hot to probe" line.
func TestProbeTextTooHot(t *testing.T) {
	res := &probe.Result{PID: 1, Seconds: 2, Funcs: []probe.FuncStat{{Func: "os.OpenFile", Skipped: "too hot to probe (≥ 3584 calls/s)"}}}
	rc := probe.Recipes["files"]
	var b bytes.Buffer
	if err := writeProbeText(&b, res, []probe.Recipe{rc}, map[string][]string{"files": rc.Statements(res)}, profileview.Target{}); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "nothing seen") || !strings.Contains(out, "files:\n  not measured (too hot to probe): os.OpenFile") {
		t.Errorf("output:\n%s", out)
	}
}

// TestProbeTextWords: a function skipped for its absence is named once
// ("time.Sleep: not in the binary", not "time.Sleep: time.Sleep: ..."),
// and a probe's kind says what a call costs.
func TestProbeTextWords(t *testing.T) {
	res := &probe.Result{PID: 1, Seconds: 2, Funcs: []probe.FuncStat{
		{Func: "time.Sleep", Skipped: "time.Sleep: " + probe.ErrAbsent.Error()},
		{Func: "main.work", Symbol: "main.work", Kind: probe.Emulated.String(), Count: 10, PerSec: 5},
	}}
	var b bytes.Buffer
	if err := writeProbeText(&b, res, nil, nil, profileview.Target{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "time.Sleep: time.Sleep") || !strings.Contains(out, "time.Sleep: not in the binary") ||
		!strings.Contains(out, "[emulated probe, about 0.9 µs a call]") {
		t.Errorf("output:\n%s", out)
	}
}

// TestProbeTextSampled: a function probed in bursts is said to be
// sampled, its count an estimate, with the bursts, the duty cycle, the
// margin and the calls counted; the recipe's answer says so too.
func TestProbeTextSampled(t *testing.T) {
	res := &probe.Result{PID: 1, Seconds: 2, Funcs: []probe.FuncStat{{
		Func: "sync.(*Mutex).lockSlow", Symbol: "internal/sync.(*Mutex).lockSlow", Kind: probe.Emulated.String(), Count: 80000, PerSec: 40000,
		Sampled: &probe.Sampling{Duty: 0.125, Bursts: 9, OnSeconds: 0.25, Counted: 10000, PerSecMargin: 1200},
		Callers: []probe.Caller{{Func: "main.contend", File: "/src/main.go", Line: 78, Share: 1}},
	}}}
	rc := probe.Recipes["locks"]
	var b bytes.Buffer
	if err := writeProbeText(&b, res, []probe.Recipe{rc}, map[string][]string{"locks": rc.Statements(res)}, profileview.Target{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"sync.(*Mutex).lockSlow  ~80000 calls, 40000 ± 1200/s, sampled: 9 bursts, attached 12.5% of the window, 10000 calls counted",
		"main.contend", "/src/main.go:78",
		"sync.(*Mutex).lockSlow sampled in 9 bursts, attached 12.5% of the window",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRecipesDocumented: docs/probe.md names every recipe, in its flag
// table and in its prose.
func TestRecipesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/probe.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range probe.RecipeNames() {
		if n := strings.Count(string(doc), "`"+name+"`"); n < 2 {
			t.Errorf("docs/probe.md names recipe %s %d times, want it in the flag table and the recipes' prose", name, n)
		}
	}
}
