package allocview

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// checkOwner refuses a source directory found from the target's own file
// paths (hostile input) unless the module's root and go.mod belong to
// root or to the process's owner: the go command is run there, with
// gosleuth's privileges.
func checkOwner(pfs proc.FS, pid int, root string) error {
	d, err := pfs.Open(pid)
	if err != nil {
		return fmt.Errorf("owner of process %d: %w", pid, err)
	}
	fi, err := d.Stat()
	d.Close()
	if err != nil {
		return fmt.Errorf("owner of process %d: %w", pid, err)
	}
	want := fi.Sys().(*syscall.Stat_t).Uid
	for _, p := range []string{root, filepath.Join(root, "go.mod")} {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 && uid != want {
			return fmt.Errorf("the source the program names, %s, belongs to uid %d, neither root nor the program's owner (uid %d): give --src %s to build it anyway", p, uid, want, root)
		}
	}
	return nil
}
