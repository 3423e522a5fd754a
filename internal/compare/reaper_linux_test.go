package compare

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// envChild, set to a patient's path, makes TestCompareChild run a long
// compare of that patient: the process TestKilledCompare kills.
const envChild = "GOSLEUTH_COMPARE_CHILD"

// TestCompareChild is the compare TestKilledCompare runs in a process of
// its own; without envChild it does nothing. Side A's shell runs the
// patient itself (sh execs a lone command); side B's forks it ("; true"
// after it), so B's program is the shell's child, in its process group.
func TestCompareChild(t *testing.T) {
	bin := os.Getenv(envChild)
	if bin == "" {
		return
	}
	cfg := Config{Sides: []Side{
		{Name: "A", Command: bin + " -tick 5ms"},
		{Name: "B", Command: bin + " -tick 5ms; true"},
	}, Keep: true, Windows: 100, Window: time.Second, Warmup: 100 * time.Millisecond, Syscalls: "off"}
	Run(context.Background(), cfg)
}

// descendants lists pid's descendants, children of any of its threads.
func descendants(fs proc.FS, pid int) []int {
	var out []int
	tids, _ := fs.TaskIDs(pid)
	for _, tid := range tids {
		for _, c := range fs.Children(pid, tid) {
			out = append(out, c)
			out = append(out, descendants(fs, c)...)
		}
	}
	return out
}

// alive reports whether pid is a process not yet exited (a zombie left
// for its new parent to reap counts as exited).
func alive(fs proc.FS, pid int) bool {
	err := proc.CheckTarget(fs.Root(), pid)
	return err == nil || !(errors.Is(err, proc.ErrProcessGone) || errors.Is(err, proc.ErrZombie))
}

// TestKilledCompare kills compare with SIGKILL while it holds two kept
// sides (one program exec'd by its shell, one forked by it): within a few
// seconds no process it started is left, the programs included.
func TestKilledCompare(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/patient")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCompareChild$")
	cmd.Env = append(os.Environ(), envChild+"="+bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	fs := proc.FS{}
	var started, patients []int
	for end := time.Now().Add(20 * time.Second); len(patients) < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("compare started %v, of which patients %v, in 20 s: want both sides' programs", started, patients)
		}
		started = descendants(fs, cmd.Process.Pid)
		patients = patients[:0]
		for _, p := range started {
			if exe, err := fs.Exe(p); err == nil && exe == bin {
				patients = append(patients, p)
			}
		}
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	var left []int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = slices.DeleteFunc(slices.Clone(started), func(p int) bool { return !alive(fs, p) })
		if len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(left) > 0 {
		for _, p := range left {
			exe, _ := fs.Exe(p)
			t.Errorf("5 s after compare was killed, process %d (%s) it started is still running", p, exe)
			unix.Kill(p, unix.SIGKILL)
		}
	}
}
