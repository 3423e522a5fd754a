package syscalls

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestOpenPathsExact: this process opens one file 5,000 times and another,
// with a path longer than the key, 1,000 times; the counter has both
// exactly, the long one cut, and a total at least their sum.
func TestOpenPathsExact(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Tracefs)
	dir := t.TempDir()
	short := filepath.Join(dir, "app.conf")
	long := filepath.Join(dir, strings.Repeat("d", PathMax), "x.conf")
	for _, p := range []string{short, long} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o, err := NewOpenPaths(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for i := range 6000 {
		p := short
		if i%6 == 5 {
			p = long
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	paths, total, err := o.Read()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, pc := range paths {
		got[pc.Path] = pc.Count
	}
	cut := long[:PathMax-1] + "..."
	if got[short] != 5000 || got[cut] != 1000 {
		t.Errorf("counted %s %d times and %s %d times, want 5000 and 1000 (all: %v)", short, got[short], cut, got[cut], paths)
	}
	if total < 6000 {
		t.Errorf("total %d, want at least 6000", total)
	}
	if len(paths) > 0 && paths[0].Path != short {
		t.Errorf("first path %q, want the most opened %q", paths[0].Path, short)
	}
}

// TestBPFProgramsKeepOtherCounters: while the path counter and the BPF
// syscall counter are attached, perf counters on the same tracepoints
// (the doctor's own, or another tracer's) still count every call: a
// tracepoint program that returns 0 drops the event for all of them.
func TestBPFProgramsKeepOtherCounters(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Tracefs)
	evs, err := SyscallEvents(HostArch)
	if err != nil {
		t.Fatal(err)
	}
	var openat []Event
	for _, e := range evs {
		if e.Name == "openat" {
			openat = append(openat, e)
		}
	}
	total, err := TotalEvent()
	if err != nil {
		t.Fatal(err)
	}
	if len(openat) != 1 {
		t.Fatalf("no syscalls:sys_enter_openat among %d events", len(evs))
	}
	c, err := NewCounter(os.Getpid(), CounterOptions{Events: []Event{openat[0], total}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o, err := NewOpenPaths(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := NewBPFCounter(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, nil, 0o644)
	sum := make([]uint64, 2)
	if _, _, err := c.Read(sum, false); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(sum)
	for range 2000 {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, _, err := c.Read(sum, false); err != nil {
		t.Fatal(err)
	}
	if got := sum[0] - before[0]; got < 2000 {
		t.Errorf("the perf counter on sys_enter_openat counted %d of 2000 opens beside the path counter", got)
	}
	if got := sum[1] - before[1]; got < 4000 {
		t.Errorf("the perf counter on raw_syscalls:sys_enter counted %d of at least 4000 calls beside the BPF counter", got)
	}
}
