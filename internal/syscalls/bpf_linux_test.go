package syscalls

import (
	"io"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestBPFCounterExact counts a patient's getppid calls (4 threads x 50,000,
// some threads started after attach) with the BPF counter: the count is
// exact, and nothing is counted for other processes.
func TestBPFCounterExact(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.BPF, testenv.Tracefs)
	p := startPatient(t, "-threads", "4", "-calls", "50000", "-late")
	c, err := NewBPFCounter(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(p.in, "go\n")
	p.expect(t, "done")
	counts, err := c.Read()
	if err != nil {
		t.Fatal(err)
	}
	nr, _ := Number(HostArch, "getppid")
	if counts[nr] != 200000 {
		t.Errorf("getppid counted %d times, want 200000 (all counts %v)", counts[nr], counts)
	}
}
