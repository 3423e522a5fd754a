package proc

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestCheckTarget: a live process, one that never existed, a kernel thread
// and a zombie each get their own answer.
func TestCheckTarget(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	if err := CheckTarget("", os.Getpid()); err != nil {
		t.Errorf("self: %v", err)
	}
	if err := CheckTarget("", 536870000); !errors.Is(err, ErrProcessGone) || err.Error() != "process 536870000 not found" {
		t.Errorf("missing: %v", err)
	}
	if err := CheckTarget("", 2); !errors.Is(err, ErrKernelThread) { // kthreadd
		t.Errorf("kthreadd: %v", err)
	}
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := CheckTarget("", z.Process.Pid)
		if errors.Is(err, ErrZombie) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an unreaped child: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
