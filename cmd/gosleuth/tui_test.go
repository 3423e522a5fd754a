//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// tmuxSession runs the CLI in a detached tmux pane of the given size.
type tmuxSession struct {
	t    *testing.T
	name string
}

func newTmux(t *testing.T, w, h string, args ...string) *tmuxSession {
	t.Helper()
	testenv.Require(t, testenv.Tmux)
	s := &tmuxSession{t: t, name: "gosleuth-test-" + strings.ReplaceAll(t.Name(), "/", "-")}
	s.tmux("kill-session", "-t", s.name).Run()
	env := "GOSLEUTH_CLI_ARGS=" + strings.Join(args, "\n")
	// The shell stays after the program exits, so the test can see what the
	// terminal was left with.
	cmd := s.tmux("new-session", "-d", "-s", s.name, "-x", w, "-y", h,
		"env", env, "TERM=xterm-256color", os.Args[0], "-test.run=^$")
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	s.tmux("set-option", "-t", s.name, "remain-on-exit", "on").Run()
	t.Cleanup(func() { s.tmux("kill-session", "-t", s.name).Run() })
	return s
}

// tmux runs a tmux command on the session's own server (-L): each test has a
// server of its own, so one test's last kill-session cannot stop the server
// another test is starting a session on.
func (s *tmuxSession) tmux(args ...string) *exec.Cmd {
	return exec.Command("tmux", append([]string{"-L", s.name}, args...)...)
}

func (s *tmuxSession) screen() string {
	out, err := s.tmux("capture-pane", "-p", "-t", s.name).Output()
	if err != nil {
		s.t.Fatalf("capture-pane: %v", err)
	}
	return string(out)
}

// waitFor polls the screen until it contains want.
func (s *tmuxSession) waitFor(want string) string {
	s.t.Helper()
	return s.waitUntil(want, func(scr string) bool { return strings.Contains(scr, want) })
}

// waitUntil polls the screen for up to 10 s until ok accepts it.
func (s *tmuxSession) waitUntil(what string, ok func(string) bool) string {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var scr string
	for time.Now().Before(deadline) {
		scr = s.screen()
		if ok(scr) {
			return scr
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("screen never showed %s:\n%s", what, scr)
	return ""
}

func (s *tmuxSession) keys(k ...string) {
	args := append([]string{"send-keys", "-t", s.name}, k...)
	if err := s.tmux(args...).Run(); err != nil {
		s.t.Fatalf("send-keys: %v", err)
	}
}

// waitDead waits up to 15 s for the program in the pane to exit. A quit
// key is handled between two refreshes; on a machine loaded 50 times over
// (load average 100 on 2 CPUs, seen while other tests ran) a refresh took
// long enough that 5 s passed, so the bound is a hang's, not a speed goal.
func (s *tmuxSession) waitDead() bool {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		out, _ := s.tmux("display-message", "-p", "-t", s.name, "#{pane_dead}").Output()
		if strings.TrimSpace(string(out)) == "1" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func TestTUI(t *testing.T) {
	s := newTmux(t, "160", "40", "top", "--interval", "200ms")
	scr := s.waitFor("COMMAND")
	if !strings.Contains(scr, "gosleuth top") || !strings.Contains(scr, "gosleuth: cpu") {
		t.Errorf("header missing:\n%s", scr)
	}
	s.waitFor("go1.26") // this test binary's own row shows its Go version, as every command writes it
	// Threads as rows.
	s.keys("H")
	s.waitFor("view threads")
	s.waitFor("┊ ")
	// Filter by a name that matches nothing but this test binary.
	name := filepath.Base(os.Args[0])
	s.keys("/")
	s.keys("-l", name)
	s.keys("Enter")
	scr = s.waitFor("filter: " + name)
	rows := 0
	for _, line := range strings.Split(scr, "\n") {
		if strings.Contains(line, name) && !strings.Contains(line, "filter:") {
			rows++
		}
	}
	if rows == 0 {
		t.Errorf("filtered view shows no matching row:\n%s", scr)
	}
	// Sort by wake-ups with a key.
	s.keys("W")
	s.waitFor("WAKE/s↓")
	// Esc clears the filter; Enter focuses on the selected process.
	s.keys("Escape")
	s.waitUntil("the filter to clear", func(scr string) bool { return !strings.Contains(scr, "filter:") })
	s.keys("Home", "Enter")
	scr = s.waitFor("filter: ")
	if !strings.Contains(scr, "view threads") {
		t.Errorf("focus did not turn threads on:\n%s", scr)
	}
	// Quit restores the terminal: the program exits cleanly.
	s.keys("q")
	if !s.waitDead() {
		t.Fatal("q did not quit")
	}
	if scr := s.screen(); strings.Contains(scr, "COMMAND") {
		t.Errorf("the monitor's screen is still shown after quitting (terminal not restored):\n%s", scr)
	}
}

func TestTUITooSmallAndResize(t *testing.T) {
	s := newTmux(t, "30", "6", "top", "--interval", "200ms")
	s.waitFor("terminal too small")
	if err := s.tmux("resize-window", "-t", s.name, "-x", "150", "-y", "30").Run(); err != nil {
		testenv.Missing(t, testenv.Tmux, "tmux cannot resize a detached window here: "+err.Error())
	}
	s.waitFor("COMMAND")
	s.keys("C-c")
	if !s.waitDead() {
		t.Fatal("Ctrl-C did not quit")
	}
}

// TestTUISigterm stops the monitor with SIGTERM: it exits and gives the
// terminal back.
func TestTUISigterm(t *testing.T) {
	s := newTmux(t, "120", "30", "top", "--interval", "200ms")
	s.waitFor("COMMAND")
	out, err := s.tmux("display-message", "-p", "-t", s.name, "#{pane_pid}").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pane pid %q: %v", out, err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !s.waitDead() {
		t.Fatal("SIGTERM did not stop top")
	}
	if scr := s.screen(); strings.Contains(scr, "COMMAND") {
		t.Errorf("terminal not restored after SIGTERM:\n%s", scr)
	}
}
