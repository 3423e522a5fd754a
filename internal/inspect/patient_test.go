package inspect

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// startPatient runs goruntime's test patient (internal/goruntime/testdata/patient)
// with args and waits for its "ready" line.
func startPatient(t *testing.T, args ...string) *testbin.Proc {
	t.Helper()
	cmd := exec.Command(testbin.Build(t, "../goruntime/testdata/patient"), args...)
	return testbin.Start(t, cmd, testbin.Options{Ready: func(l string) bool { return strings.HasPrefix(l, "ready ") }, Lines: true})
}

// self asks the patient for its own view (SIGUSR1: one "self {json}" line).
func self(t *testing.T, p *testbin.Proc) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	p.AskJSON(t, syscall.SIGUSR1, "self ", &m, 30*time.Second)
	return m
}
