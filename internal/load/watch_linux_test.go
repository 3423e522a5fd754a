package load

import (
	"bufio"
	"os/exec"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestWatchCountsExitedThreads: a target whose wake-ups happen on threads
// that exit (each wakes about twenty times, then ends) is seen waking
// hundreds of times a second. The process's own switch counter sums live
// threads only, so its delta over the same time (the watch's count before)
// misses the switches of every thread that exited.
func TestWatchCountsExitedThreads(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	bin := testbin.Build(t, "./testdata/threadchurn")
	cmd := exec.Command(bin)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if !bufio.NewScanner(out).Scan() {
		t.Fatal("patient did not start")
	}
	w, err := newWatcher("", cmd.Process.Pid, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	first := w.read()
	naive0 := w.wb.Latest().Find(int32(cmd.Process.Pid)).VolCtxsw
	var last targetReading
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		last = w.read()
	}
	naive1 := w.wb.Latest().Find(int32(cmd.Process.Pid)).VolCtxsw
	sec := last.w.End.Sub(first.w.End).Seconds()
	rate := float64(last.w.VolCtxsw-first.w.VolCtxsw) / sec
	naive := float64(proc.Delta(naive0, naive1)) / sec
	t.Logf("wake-ups merged by thread %.0f/s, from the process's live-thread sum %.0f/s", rate, naive)
	// Four threads at a time, each sleeping 1 ms: well over 1,000 wake-ups
	// a second when the machine is quiet; 200 leaves room for a loaded one.
	if rate < 200 {
		t.Errorf("wake-ups %.0f/s from threads sleeping 1 ms", rate)
	}
	if rate < 2*naive {
		t.Errorf("merged count %.0f/s not well above the live-thread delta %.0f/s: the patient's threads did not exit between readings?", rate, naive)
	}
}
