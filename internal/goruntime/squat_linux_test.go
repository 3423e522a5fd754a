package goruntime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestAgentDirSquatted: another user created the agent's socket directory
// (/tmp/gosleuth-UID) first. The agent must still listen, in a private
// directory of its own, and gosleuth must still find it (it used to stop
// silently).
func TestAgentDirSquatted(t *testing.T) {
	testenv.Require(t, testenv.Root)
	const uid = 54321 // a user no other test runs as
	squat := wire.SocketDir(uid, "")
	if err := os.Mkdir(squat, 0o755); err != nil { // root's, not uid's
		t.Fatalf("squat %s: %v", squat, err)
	}
	t.Cleanup(func() {
		os.RemoveAll(squat)
		if more, _ := filepath.Glob(wire.FallbackGlob(uid)); len(more) > 0 {
			for _, d := range more {
				os.RemoveAll(d)
			}
		}
	})
	cmd := exec.Command(buildPatient(t), "-mode", "idle", "-agent")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // no XDG_RUNTIME_DIR: /tmp it is
	line := testbin.Start(t, cmd, testbin.Options{Stop: syscall.SIGTERM}).Ready()
	sock := strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	if !strings.HasPrefix(sock, "/tmp/gosleuth-54321.") {
		t.Fatalf("agent socket %q: want a private fallback directory", sock)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src, notes, err := Connect(ctx, cmd.Process.Pid, Options{})
	if err != nil {
		t.Fatalf("gosleuth did not find the agent in %s: %v (notes %q)", sock, err, notes)
	}
	defer src.Close()
	if src.Kind() != "agent" {
		t.Errorf("gosleuth connected to %s %s, not the agent in %s (notes %q)", src.Kind(), src.Addr(), sock, notes)
	}
}
