package proc

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestAllowedCPUs: on this process's /proc the affinity call and the
// status line agree; a fixture tree, whose PIDs are not this process's,
// is read from its status files.
func TestAllowedCPUs(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	pid := os.Getpid()
	got, err := NewFS("").AllowedCPUs(pid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("Cpus_allowed_list:"))
	if i < 0 {
		t.Fatal("no Cpus_allowed_list in status")
	}
	line, _, _ := bytes.Cut(b[i+len("Cpus_allowed_list:"):], []byte("\n"))
	want, err := ParseCPUList(string(line))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("AllowedCPUs = %v, status says %v", got, want)
	}
	if _, ok := NewFS("").affinity(pid); !ok {
		t.Error("the affinity call was not used on this process's /proc")
	}

	fix := NewFS("testdata/proc")
	if _, ok := fix.affinity(8286); ok {
		t.Error("the affinity call was used on a fixture tree")
	}
	cpus, err := fix.AllowedCPUs(8286)
	if err != nil || !slices.Equal(cpus, []int{0, 1}) {
		t.Errorf("fixture: %v, %v; its status says 0-1", cpus, err)
	}
}
