package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadBadInput(t *testing.T) {
	const u = "http://127.0.0.1:1/"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no url", []string{"load", "--rate", "10", "--duration", "1s"}, "exactly one URL"},
		{"two urls", []string{"load", u, u, "--rate", "10", "--duration", "1s"}, "exactly one URL"},
		{"bad scheme", []string{"load", "ftp://x/", "--rate", "10", "--duration", "1s"}, "scheme must be http or https"},
		{"no host", []string{"load", "http:///x", "--rate", "10", "--duration", "1s"}, "no host"},
		{"no rate", []string{"load", u, "--duration", "1s"}, "--rate is required"},
		{"zero rate", []string{"load", u, "--rate", "0", "--duration", "1s"}, "must be above 0"},
		{"negative rate", []string{"load", u, "--rate", "-5", "--duration", "1s"}, "must be above 0"},
		{"bad rate", []string{"load", u, "--rate", "fast", "--duration", "1s"}, "want requests per second"},
		{"no duration", []string{"load", u, "--rate", "10"}, "--duration is required"},
		{"bad duration", []string{"load", u, "--rate", "10", "--duration", "soon"}, "invalid value \"soon\" for flag -duration"},
		{"long duration", []string{"load", u, "--rate", "10", "--duration", "2h"}, "above the limit"},
		{"bad sla", []string{"load", u, "--rate", "10", "--duration", "1s", "--sla", "p99>=3ms"}, "want pNN<=DURATION"},
		{"bad step", []string{"load", u, "--rate", "10", "--duration", "1s", "--step", "+10"}, "want +RATE/DURATION"},
		{"step longer than run", []string{"load", u, "--rate", "10", "--duration", "1s", "--step", "+10/5s"}, "longer than the whole run"},
		{"max below start", []string{"load", u, "--rate", "100", "--duration", "10s", "--step", "+10/1s", "--max-rate", "50"}, "below the starting rate"},
		{"bad max rate", []string{"load", u, "--rate", "10", "--duration", "1s", "--max-rate", "max"}, "--max-rate"},
		{"ramp from max", []string{"load", u, "--rate", "max", "--duration", "2s", "--step", "+10/1s"}, "needs a starting rate"},
		{"bad format", []string{"load", u, "--rate", "10", "--duration", "1s", "--format", "xml"}, "text or json"},
		{"bad header", []string{"load", u, "--rate", "10", "--duration", "1s", "--header", "nocolon"}, "want \"Name: value\""},
		{"bad connections", []string{"load", u, "--rate", "10", "--duration", "1s", "--connections", "0"}, "connections must be"},
		{"bad protocol", []string{"load", u, "--rate", "10", "--duration", "1s", "--http", "spdy"}, "protocol must be"},
		{"negative gc poll", []string{"load", u, "--rate", "10", "--duration", "1s", "--gc-poll", "-1ms"}, "--gc-poll must be 0 (off) or 1ms..1s"},
		{"gc poll too fine", []string{"load", u, "--rate", "10", "--duration", "1s", "--gc-poll", "100us"}, "--gc-poll must be"},
		{"bad flag", []string{"load", u, "--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errb)
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

// TestLoadRun runs the command against a server in this process: the JSON
// report on stdout and the files in --out-dir DIR.
func TestLoadRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") != "1" || r.Method != "POST" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "out")
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"load", srv.URL + "/x", "--rate", "50", "--duration", "2s",
		"--connections", "4", "--method", "post", "--header", "X-Test: 1", "--body", "{}", "--format", "json",
		"--out-dir", dir, "--max-lag", "200ms"}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, errb.String())
	}
	var rep struct {
		Steps []struct {
			TargetRate   float64            `json:"target_rate"`
			AchievedRate float64            `json:"achieved_rate"`
			Valid        *bool              `json:"valid"`
			Latency      map[string]float64 `json:"latency_ms"`
			Errors       *int64             `json:"errors"`
			Status       map[string]int64   `json:"status"`
			Target       *struct {
				PID int `json:"pid"`
			} `json:"target"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out.String())
	}
	if len(rep.Steps) != 1 {
		t.Fatalf("%d steps", len(rep.Steps))
	}
	s := rep.Steps[0]
	if s.TargetRate != 50 || s.Valid == nil || s.Errors == nil || *s.Errors != 0 || s.Status["200"] == 0 {
		t.Errorf("step %+v", s)
	}
	for _, k := range []string{"p50", "p90", "p99", "p999", "max"} {
		if _, ok := s.Latency[k]; !ok {
			t.Errorf("latency_ms lacks %s", k)
		}
	}
	// The server is this process, found through its listening socket.
	if s.Target == nil || s.Target.PID != os.Getpid() {
		t.Errorf("target %+v, want pid %d (stderr %q)", s.Target, os.Getpid(), errb.String())
	}
	for _, f := range []string{"report.html", "report.json", "series.csv", "latency.hlog", "step-01.hgrm"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
}

// TestLoadRefused: a target that refuses every connection yields a report
// with the errors counted, and exit 1 (a failure, not a measurement).
func TestLoadRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"load", u, "--rate", "20", "--duration", "1s", "--watch", "-1"}, &out, &errb)
	if code := exitCode(err, &errb); code != 1 || !strings.Contains(err.Error(), "requests failed") {
		t.Errorf("exit %d (%v), want 1 saying the requests failed", code, err)
	}
	if !strings.Contains(out.String(), "refused=") {
		t.Errorf("report lacks the refused count:\n%s", out.String())
	}
}

// TestLoadInvalidFails: a run whose step is marked invalid (here a
// generator lag limit no generator meets) prints its report and exits 1.
func TestLoadInvalidFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"load", srv.URL, "--rate", "200", "--duration", "1s", "--watch", "-1",
		"--max-lag", "1ns", "--quiet"}, &out, &errb)
	if code := exitCode(err, &errb); code != 1 || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("exit %d (%v), want 1 naming the invalid step", code, err)
	}
	if !strings.Contains(out.String(), "NO") {
		t.Errorf("report lacks the invalid step:\n%s", out.String())
	}
}

// TestLoadInterrupt: SIGINT stops a long run and the report of what ran is
// still printed, exit 0.
func TestLoadInterrupt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOSLEUTH_CLI_ARGS="+strings.Join([]string{"load", srv.URL, "--rate", "50",
		"--duration", "1m", "--connections", "2", "--watch", "-1", "--format", "json"}, "\n"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\nstderr: %s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("still running 30 s after SIGINT")
	}
	var rep struct {
		Interrupted bool `json:"interrupted"`
		Steps       []struct {
			Requests int64 `json:"requests"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("no JSON report after SIGINT: %v\n%s", err, out.String())
	}
	if !rep.Interrupted || len(rep.Steps) != 1 || rep.Steps[0].Requests == 0 {
		t.Errorf("report %+v", rep)
	}
}

// TestLoadSLAGate checks a --sla that is not met exits with status 3 (a
// deploy gate), after writing the report to -o FILE.
func TestLoadSLAGate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "report.txt")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"load", srv.URL, "--rate", "20", "--duration", "2s",
		"--connections", "4", "--sla", "p99<=1ms", "--quiet", "-o", out}, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 3 {
		t.Fatalf("exit %d (%v), want 3; stderr %s", code, err, stderr.String())
	}
	if b, rerr := os.ReadFile(out); rerr != nil || !bytes.Contains(b, []byte("FAIL")) {
		t.Errorf("report file: %v\n%s", rerr, b)
	}
	if !strings.Contains(stderr.String(), "SLA p99<=1ms was not met") {
		t.Errorf("stderr %q", stderr.String())
	}
}
