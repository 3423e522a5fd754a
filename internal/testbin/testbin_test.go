package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestBuildOnceAndCleanup(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if err := os.Chdir(src); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	a := Build(t, ".")
	b := Build(t, ".")
	if a != b {
		t.Fatalf("built twice: %s and %s", a, b)
	}
	if out, err := exec.Command(a).CombinedOutput(); err != nil || string(out) != "hi\n" {
		t.Fatalf("run: %v %q", err, out)
	}
	fi, err := os.Stat(filepath.Dir(a))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("directory %v mode %v, want 0755", err, fi.Mode().Perm())
	}
	Cleanup()
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("after Cleanup: %v", err)
	}
}
