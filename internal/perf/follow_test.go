package perf

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestFollowerFixture checks Poll's added/gone bookkeeping on a fake proc
// tree, including a child process found through a children file.
func TestFollowerFixture(t *testing.T) {
	root := t.TempDir()
	mkTask := func(pid, tid int, children string) {
		dir := filepath.Join(root, itoa(pid), "task", itoa(tid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "children"), []byte(children), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkTask(100, 100, "")
	mkTask(100, 101, "")

	f := NewFollower(root, 100, true)
	added, gone, err := f.Poll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Task{{100, 100}, {100, 101}}; !slices.Equal(added, want) || len(gone) != 0 {
		t.Fatalf("first poll: added %v gone %v, want %v and none", added, gone, want)
	}

	// A new thread forks a child with two threads; thread 101 exits.
	mkTask(100, 102, "200 ")
	mkTask(200, 200, "")
	mkTask(200, 201, "")
	if err := os.RemoveAll(filepath.Join(root, "100", "task", "101")); err != nil {
		t.Fatal(err)
	}
	added, gone, err = f.Poll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Task{{100, 102}, {200, 200}, {200, 201}}; !slices.Equal(added, want) {
		t.Fatalf("second poll added %v, want %v", added, want)
	}
	if want := []Task{{100, 101}}; !slices.Equal(gone, want) {
		t.Fatalf("second poll gone %v, want %v", gone, want)
	}
	if got := f.Processes(); !slices.Equal(got, []int{100, 200}) {
		t.Fatalf("processes %v, want [100 200]", got)
	}

	// Without descendants the child is never seen.
	g := NewFollower(root, 100, false)
	added, _, _ = g.Poll()
	if want := []Task{{100, 100}, {100, 102}}; !slices.Equal(added, want) {
		t.Fatalf("no descendants: added %v, want %v", added, want)
	}

	// A zombie: the leader's entry stays until the parent reaps it.
	z := NewFollower(root, 300, false)
	mkTask(300, 300, "")
	if err := os.WriteFile(filepath.Join(root, "300", "stat"), []byte("300 (a) b) Z 1 300"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := z.Poll(); !errors.Is(err, ErrExited) {
		t.Fatalf("zombie: err = %v, want ErrExited", err)
	}
	if err := os.RemoveAll(filepath.Join(root, "300")); err != nil {
		t.Fatal(err)
	}

	// Everything exits.
	if err := os.RemoveAll(filepath.Join(root, "100")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "200")); err != nil {
		t.Fatal(err)
	}
	_, gone, err = f.Poll()
	if !errors.Is(err, ErrExited) {
		t.Fatalf("after exit err = %v, want ErrExited", err)
	}
	if len(gone) != 4 {
		t.Fatalf("after exit gone %v, want 4 tasks", gone)
	}
}

// TestFollowerLive follows a real shell that forks a sleeping child.
func TestFollowerLive(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	if _, err := os.Stat("/proc/self/task/" + itoa(os.Getpid()) + "/children"); err != nil {
		testenv.Missing(t, testenv.Linux, "kernel without /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): "+err.Error())
	}
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	f := NewFollower("", cmd.Process.Pid, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := f.Poll(); err != nil {
			t.Fatal(err)
		}
		if len(f.Processes()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child of sh not found; processes %v", f.Processes())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Kill the whole group: sh and sleep both go.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	procs := f.Processes()
	for _, pid := range procs {
		if pid != cmd.Process.Pid {
			p, _ := os.FindProcess(pid)
			_ = p.Kill()
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		_, _, err := f.Poll()
		if errors.Is(err, ErrExited) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still tracking %v after kill", f.Processes())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
