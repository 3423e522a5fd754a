package syscalls

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestForkingTargetKeepsItsPace counts the syscalls of a shell that forks
// subshells in a loop. Inherited into every child, the ~360 counters are
// copied at each fork: the fork rate fell 86x. Following threads only, with
// children in one inherited total, the target keeps at least half its pace
// (the bound), and its children's calls are still in the total.
func TestForkingTargetKeepsItsPace(t *testing.T) {
	testenv.Timing(t)
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	file := filepath.Join(t.TempDir(), "n")
	sh := exec.Command("/bin/sh", "-c", `n=0; while :; do ( : ); n=$((n+1)); [ $((n % 64)) -eq 0 ] && echo $n > `+file+`; done`)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	// The shell's redirection truncates the file before it writes the
	// count, so a read can fall between the two and find it empty: read
	// again until it holds a number.
	forks := func() int {
		for range 1000 {
			b, _ := os.ReadFile(file)
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return n
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("the shell's count file never held a number")
		return 0
	}
	rate := func(d time.Duration) float64 {
		n0 := forks()
		time.Sleep(d)
		return float64(forks()-n0) / d.Seconds()
	}
	time.Sleep(300 * time.Millisecond)
	alone := rate(time.Second)
	if alone < 200 {
		t.Fatalf("the shell forks only %.0f times a second alone", alone)
	}
	evs, err := SyscallEvents(HostArch)
	if err != nil {
		t.Fatal(err)
	}
	tot, err := TotalEvent()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCounter(sh.Process.Pid, CounterOptions{Events: evs, ThreadsOnly: true, Total: &tot})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	counted := rate(time.Second)
	sum := make([]uint64, len(evs))
	total, _, err := c.Read(sum, false)
	if err != nil {
		t.Fatal(err)
	}
	var own uint64
	for _, v := range sum {
		own += v
	}
	after := rate(time.Second)
	t.Logf("forks/s: %.0f alone, %.0f counted (%.2fx), %.0f after; calls: %d own, %d with children",
		alone, counted, counted/alone, after, own, total)
	if counted < 0.5*min(alone, after) {
		t.Errorf("counting slowed the forking target to %.2fx of its pace (%.0f/s against %.0f/s)", counted/min(alone, after), counted, min(alone, after))
	}
	if c.ChildrenCopied {
		t.Error("inherit_thread refused: children got every counter")
	}
	if total <= own {
		t.Errorf("the total (%d) does not include the children's calls beyond the shell's own %d", total, own)
	}
}
