package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestExporterServes(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	f := &exporterFlags{listen: "127.0.0.1:0", interval: 200 * time.Millisecond, idleEvery: time.Second, groupBy: "unit,container,exe", maxSeries: 5000, topN: 20, procRoot: "/proc", doctorEvery: 0}
	go func() { done <- runExporter(ctx, f, io.Discard, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("exporter did not start: %v", err)
	}
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, body = get("GET", "/metrics"); strings.Contains(body, "gosleuth_group_wakeups_total{") {
			break
		}
	}
	if !strings.Contains(body, "gosleuth_group_wakeups_total{") || !strings.Contains(body, `gosleuth_process_info{`) && !strings.Contains(body, "gosleuth_exporter_tasks") {
		t.Errorf("metrics without group series:\n%.2000s", body)
	}
	if code, page := get("GET", "/"); code != 200 || !strings.Contains(page, "/metrics") {
		t.Errorf("index: %d %.200s", code, page)
	}
	if code, _ := get("POST", "/metrics"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("exporter: %v", err)
	}
}

func TestExporterBadUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exporter", "--listen", "nocolon"}, "want HOST:PORT"},
		{[]string{"exporter", "--interval", "1ms"}, "--interval must be between"},
		{[]string{"exporter", "--idle-every", "100ms"}, "--idle-every must be between --interval"},
		{[]string{"exporter", "--group-by", "pid"}, "not unit, container or exe"},
		{[]string{"exporter", "--max-series", "1"}, "at least 10"},
		{[]string{"exporter", "extra"}, "takes no arguments"},
		{[]string{"exporter", "--doctor-every", "10s"}, "--doctor-every must be 0 or at least 1m"},
		{[]string{"exporter", "--doctor-window", "4m"}, "half of it"},
		{[]string{"exporter", "--doctor-window", "2s"}, "too short for the doctor's close looks, which decide the causes: give at least 4s"},
	} {
		err := run(context.Background(), tt.args, io.Discard, io.Discard)
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err %v, want a usage error with %q", tt.args, err, tt.want)
		}
	}
}

// TestExporterFailsOneLine: a procfs root that does not exist and a port
// in use are failures (exit 1) with one line, before any serving.
func TestExporterFailsOneLine(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exporter", "--proc", "/nonexistent", "--listen", "127.0.0.1:0"}, "no such file or directory"},
		{[]string{"exporter", "--listen", ln.Addr().String()}, "address already in use"},
	} {
		var stderr strings.Builder
		code := exitCode(run(context.Background(), tt.args, io.Discard, &stderr), &stderr)
		if code != 1 || !strings.Contains(stderr.String(), tt.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", tt.args, code, stderr.String())
		}
	}
}
