package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestVersionNamesCommit builds gosleuth as a user would from a checkout
// and requires `version` to name the commit the go command stamped from the
// build info, after the version given at link time (the module's version
// where it was fetched as one).
func TestVersionNamesCommit(t *testing.T) {
	testenv.Require(t, testenv.Git)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gosleuth")
	// -buildvcs=true: a GOFLAGS of -buildvcs=false (set on some machines)
	// would leave the commit out.
	build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", "-X main.version=v9.9.9", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	want := "gosleuth v9.9.9 (" + strings.TrimSpace(string(head))[:12]
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), " go1.") {
		t.Errorf("version printed %q; want it to start %q and name the Go release", out, want)
	}
}
