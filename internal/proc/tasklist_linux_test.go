package proc

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTaskLister lists this test's own threads, more of them than one
// getdents64 buffer holds, again and again as they change, and compares
// every listing with TaskIDs'.
func TestTaskLister(t *testing.T) {
	fs := NewFS("")
	pid := os.Getpid()
	l, err := fs.NewTaskLister(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	same := func(when string) []int {
		t.Helper()
		// Threads the runtime starts or stops between the two
		// listings would differ: list until two agree.
		for range 20 {
			got, err := l.List(nil)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			want, err := fs.TaskIDs(pid)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			slices.Sort(want)
			if slices.Equal(got, want) {
				return got
			}
		}
		t.Fatalf("%s: the lister and TaskIDs never agreed", when)
		return nil
	}
	same("at first")
	// 300 goroutines locked to their threads: 300 threads more, 10 KB of
	// entries, over two buffers of 4 KB. Each says which thread it holds
	// (the runtime may start or retire other threads meanwhile).
	var wg sync.WaitGroup
	release := make(chan struct{})
	tids := make(chan int)
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			tids <- unix.Gettid()
			<-release
		}()
	}
	locked := make([]int, 0, 300)
	for range 300 {
		locked = append(locked, <-tids)
	}
	many := same("with 300 threads more")
	for _, tid := range locked {
		if _, ok := slices.BinarySearch(many, tid); !ok {
			t.Fatalf("thread %d, locked by a goroutine, is not listed (%d listed)", tid, len(many))
		}
	}
	// Locked threads exit with their goroutines, but for the leader (the
	// process's main thread, which the runtime parks instead when a
	// goroutine locked to it ends).
	locked = slices.DeleteFunc(locked, func(tid int) bool { return tid == pid })
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := same("after they exited")
		left := 0
		for _, tid := range locked {
			if _, ok := slices.BinarySearch(after, tid); ok {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the exited threads still listed", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTaskListerGone: a child that exits is gone to its lister while it is
// a zombie, and after it is reaped (the lister's descriptors then refer to
// a process that no longer exists, whatever takes its PID).
func TestTaskListerGone(t *testing.T) {
	// The exit is told from the process's pidfd, or from its stat file
	// where no pidfd could be opened.
	for _, mode := range []string{"pidfd", "stat"} {
		t.Run(mode, func(t *testing.T) { taskListerGone(t, mode == "stat") })
	}
}

func taskListerGone(t *testing.T, noPidfd bool) {
	cmd := exec.Command("sh", "-c", "read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	l, err := NewFS("").NewTaskLister(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.pidfd < 0 {
		t.Fatal("no pidfd opened for a process of this PID namespace")
	}
	if noPidfd {
		unix.Close(l.pidfd)
		l.pidfd = -1
	}
	if tids, err := l.List(nil); err != nil || !slices.Equal(tids, []int{pid}) {
		t.Fatalf("a live shell: %v, %v", tids, err)
	}
	if (l.statfd >= 0) != noPidfd {
		t.Errorf("stat file open %v with the pidfd %s", l.statfd >= 0, map[bool]string{true: "closed", false: "open"}[noPidfd])
	}
	stdin.Close()
	// Unreaped: a zombie, once its stat says so.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(NewFS("").PID(pid, "stat"))
		if err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell never became a zombie: %q, %v", b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := l.List(nil); !errors.Is(err, ErrProcessGone) || !errors.Is(err, ErrZombie) {
		t.Errorf("a zombie: err = %v, want ErrProcessGone and ErrZombie", err)
	}
	cmd.Wait()
	if _, err := l.List(nil); !errors.Is(err, ErrProcessGone) {
		t.Errorf("reaped: err = %v, want ErrProcessGone", err)
	}
	if _, err := NewFS("").NewTaskLister(pid); !errors.Is(err, ErrProcessGone) {
		t.Errorf("a new lister of a reaped process: err = %v, want ErrProcessGone", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := l.List(nil); err == nil {
		t.Error("a closed lister listed")
	}
}
