package inspect

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// patient runs goruntime's test patient (internal/goruntime/testdata/patient)
// in a mode.
type patient struct {
	cmd   *exec.Cmd
	lines chan string
}

func startPatient(t *testing.T, args ...string) *patient {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "../goruntime/testdata/patient"), args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start patient: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p := &patient{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, "ready ") {
			t.Fatalf("patient did not start: %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("patient not ready after 30s")
	}
	return p
}

func (p *patient) pid() int { return p.cmd.Process.Pid }

// self asks the patient for its own view (SIGUSR1: one "self {json}" line).
func (p *patient) self(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-p.lines:
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "self ")), &m); err != nil {
			t.Fatalf("patient report %q: %v", l, err)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no report from the patient")
	}
	return nil
}
