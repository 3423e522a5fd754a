package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestEscapesProcessText runs a process whose name and command line carry
// terminal escape sequences (any user can choose both) and checks no
// command prints them raw: they show escaped, as \x1b.
func TestEscapesProcessText(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	dir := t.TempDir()
	evil := filepath.Join(dir, "\x1b[2J\x1b]0;x\x07")
	if err := os.Symlink("/bin/sleep", evil); err != nil {
		t.Fatal(err)
	}
	p := exec.Command(evil, "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	pid := strconv.Itoa(p.Process.Pid)
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	if !strings.Contains(string(b), "\x1b") {
		t.Fatalf("the patient's comm %q carries no escape", b)
	}
	runs := [][]string{
		{"top", "--pid", pid, "--once", "--interval", "200ms"},
		{"doctor", "--pid", pid, "--duration", "1s", "--max-looks", "0"},
	}
	if testenv.Has(testenv.Root) {
		runs = append(runs, []string{"syscalls", "--pid", pid, "--duration", "1s"})
	}
	for _, args := range runs {
		stdout, stderr, code := runChild(t, os.Args[0], nil, args...)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", args[0], code, stderr)
		}
		if strings.ContainsRune(stdout+stderr, 0x1b) {
			t.Errorf("%s printed a raw escape:\n%q", args[0], stdout+stderr)
		}
		if !strings.Contains(stdout, `\x1b[2J`) {
			t.Errorf("%s does not show the name escaped:\n%s", args[0], stdout)
		}
	}
}
