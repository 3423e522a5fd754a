package proc

import (
	"os"
	"os/exec"
	"testing"
)

// TestExiting: a running process has not begun to exit; one that has
// exited and been reaped has.
func TestExiting(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pid  int
		want bool
	}{
		{"running", os.Getpid(), false},
		{"reaped", gone.Process.Pid, true},
	} {
		if got := Exiting(tc.pid); got != tc.want {
			t.Errorf("%s (pid %d): exiting %v, want %v", tc.name, tc.pid, got, tc.want)
		}
	}
}
