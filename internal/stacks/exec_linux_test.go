package stacks

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestExecMidProfileNoted profiles a shell that executes another program
// half-way: names after the exec come from a binary the profile did not
// start with, and the profile must say so (it said nothing).
func TestExecMidProfileNoted(t *testing.T) {
	needPerf(t)
	testenv.Require(t, testenv.Linux)
	sh := exec.Command("/bin/sh", "-c", "sleep 1; exec sleep 30")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sh.Process.Kill(); sh.Wait() }()
	raw, err := Sample(context.Background(), Options{PID: sh.Process.Pid, Duration: 2500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(raw.Notes, "\n"), "executed a new program during the profile") {
		t.Errorf("no note of the exec: %q", raw.Notes)
	}
}
