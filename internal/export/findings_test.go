package export

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/window"
)

// spinLook stands for a close look whose instruments cost the target CPU:
// the burner (internal/window's patient) spins half of every millisecond
// while it runs. It records the processes it looked at.
type spinLook struct {
	mu     sync.Mutex
	looked map[int]bool
}

func (*spinLook) Source() window.Source { return "spin" }

func (l *spinLook) Look(ctx context.Context, pid int, d time.Duration, _ *window.Window) error {
	l.mu.Lock()
	l.looked[pid] = true
	l.mu.Unlock()
	syscall.Kill(pid, syscall.SIGUSR1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return syscall.Kill(pid, syscall.SIGUSR2)
}

// TestDoctorFindingCPUWithoutLooks: the periodic doctor's findings give a
// process's CPU as it is with nothing of gosleuth attached: a 1 ms ticker
// that spins while a close look runs on it is exported with the CPU of its
// ticker (its idle-wakeups finding's cores), not the looks'.
func TestDoctorFindingCPUWithoutLooks(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	b, err := os.ReadFile(testbin.Build(t, "../window/testdata/burner"))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("burn%d", os.Getpid())
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	pid := testbin.Start(t, exec.Command(path), testbin.Options{}).PID()
	e, err := New(Config{GroupBy: []string{KindExe}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.reader.Close()
	cpu := func() float64 { // the ticker's CPU seconds, as the exporter samples its group
		if err := e.Sample(); err != nil {
			t.Fatal(err)
		}
		g := groupOfExe(t, e, name)
		return g.UserSec + g.SysSec
	}
	cpu()                     // the baseline
	quiet := func() float64 { // cores over a second, nothing attached
		a, t0 := cpu(), time.Now()
		time.Sleep(time.Second)
		return (cpu() - a) / time.Since(t0).Seconds()
	}
	look := &spinLook{looked: map[int]bool{}}
	before := quiet()
	a, t0 := cpu(), time.Now()
	e.diagnose(context.Background(), DoctorConfig{Window: 5 * time.Second, MaxLooks: 16, Looks: []window.Look{look}})
	during := (cpu() - a) / time.Since(t0).Seconds()
	ref := (before + quiet()) / 2
	s, _ := e.Last() // the sample after the run carries its findings
	findings := s.Findings
	if !look.looked[pid] {
		t.Fatalf("triage gave the ticker no close look (%d findings)", len(findings))
	}
	if during < ref+0.05 {
		t.Fatalf("the look's spin did not raise the ticker's CPU by 0.05 core (%.3f against %.3f): nothing to correct", during, ref)
	}
	for _, f := range findings {
		if f.PID != pid || f.ID != "idle-wakeups" {
			continue
		}
		t.Logf("ticker %.3f cores with nothing attached, %.3f over the doctor's run; the finding says %.3f", ref, during, f.Cores)
		if f.Cores > ref+(during-ref)/3 || f.Cores < ref/2.5 {
			t.Errorf("the finding says %.3f cores, the ticker uses %.3f with nothing attached (%.3f with the look)", f.Cores, ref, during)
		}
		return
	}
	t.Errorf("no idle-wakeups finding for the ticker: %+v (doctor errors %d)", findings, e.doctorErrors)
}
