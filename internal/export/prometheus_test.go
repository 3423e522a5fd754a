package export

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestRulesWithPromtool checks the shipped Prometheus rules and runs their
// unit tests.
func TestRulesWithPromtool(t *testing.T) {
	testenv.Require(t, testenv.Prometheus)
	dir := "../../deploy/prometheus"
	for _, args := range [][]string{
		{"check", "rules", "gosleuth-rules.yml"},
		{"test", "rules", "gosleuth-rules_test.yml"},
	} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestRealPrometheus starts Debian's Prometheus scraping the exporter at
// 1 s, with a 1 ms ticker patient running and the doctor on, and asks
// Prometheus's HTTP API for the patient's group series and its
// idle-wakeups finding.
func TestRealPrometheus(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Prometheus)
	_, name := startTicker(t)

	e, err := New(Config{GroupBy: []string{KindExe}, Interval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Run(ctx)
	go e.RunDoctor(ctx, DoctorConfig{Every: time.Hour, Window: 2 * time.Second})
	ts := httptest.NewServer(e.Handler())
	defer ts.Close()

	dir := t.TempDir()
	target := ts.Listener.Addr().String()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gosleuth\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	promAddr := ln.Addr().String()
	ln.Close()
	prom := exec.Command("prometheus", "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { prom.Process.Kill(); prom.Wait() }()

	query := func(q string) int {
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || r.Status != "success" {
			return -1
		}
		return len(r.Data.Result)
	}
	for _, q := range []string{
		`rate(gosleuth_group_wakeups_total{group="` + name + `"}[5s]) > 500`,
		`gosleuth_finding{id="idle-wakeups", group="` + name + `"} == 1`,
	} {
		deadline := time.Now().Add(60 * time.Second)
		for query(q) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus never answered %s with a series", q)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("Prometheus has %s", q)
	}
	if n := query(`up{job="gosleuth"} == 1`); n != 1 {
		t.Errorf("up{job=gosleuth}: %d series", n)
	}
}
