package syscalls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

func TestName(t *testing.T) {
	tests := []struct {
		arch Arch
		nr   int
		want string
	}{
		{AMD64, 0, "read"},
		{AMD64, 110, "getppid"},
		{AMD64, 202, "futex"},
		{AMD64, 435, "clone3"},
		{ARM64, 63, "read"},
		{ARM64, 173, "getppid"},
		{ARM64, 98, "futex"},
		{AMD64, 9999, "sys_9999"},
		{AMD64, -1, "sys_-1"},
		{Arch("mips"), 1, "sys_1"},
	}
	for _, tt := range tests {
		if got := Name(tt.arch, tt.nr); got != tt.want {
			t.Errorf("Name(%s, %d) = %q, want %q", tt.arch, tt.nr, got, tt.want)
		}
	}
}

func TestNumber(t *testing.T) {
	tests := []struct {
		arch Arch
		name string
		nr   int
		ok   bool
	}{
		{AMD64, "getppid", 110, true},
		{AMD64, "newfstat", 5, true},
		{AMD64, "newuname", 63, true},
		{AMD64, "umount", 166, true},
		{ARM64, "newfstat", 80, true},
		{AMD64, "nosuchcall", -1, false},
	}
	for _, tt := range tests {
		nr, ok := Number(tt.arch, tt.name)
		if nr != tt.nr || ok != tt.ok {
			t.Errorf("Number(%s, %q) = %d, %v, want %d, %v", tt.arch, tt.name, nr, ok, tt.nr, tt.ok)
		}
	}
}

// TestTracepointsNamed checks the host's table against the kernel: every
// syscalls:sys_enter_* tracepoint must have a number.
func TestTracepointsNamed(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	root, err := tracefs.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "events", "syscalls")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("cannot list syscall tracepoints: %v", err)
	}
	if table(HostArch) == nil {
		t.Fatalf("no syscall name table for %s", HostArch)
	}
	var n int
	for _, e := range ents {
		name, ok := strings.CutPrefix(e.Name(), "sys_enter_")
		if !ok {
			continue
		}
		n++
		if _, ok := Number(HostArch, name); !ok {
			t.Errorf("tracepoint %s has no number in the %s table", filepath.Join(dir, e.Name()), HostArch)
		}
	}
	if n < 100 {
		t.Errorf("only %d sys_enter tracepoints", n)
	}
}
