package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// CheckTarget says whether pid, under the proc mount root ("" means
// /proc), can be watched: nil for a live user process, else an error
// wrapping ErrProcessGone, ErrZombie or ErrKernelThread that every command
// prints the same way ("process 2 is a kernel thread").
func CheckTarget(root string, pid int) error {
	if root == "" {
		root = "/proc"
	}
	if pid <= 0 {
		return fmt.Errorf("process %d: %w", pid, ErrProcessGone)
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("process %d %w", pid, ErrProcessGone)
	}
	if err != nil {
		return fmt.Errorf("read process %d: %w", pid, err)
	}
	var s statFields
	if err := parseStat(b, &s); err != nil {
		return fmt.Errorf("read process %d: %w", pid, err)
	}
	switch {
	case s.State == 'Z' || s.State == 'X':
		return fmt.Errorf("process %d %w", pid, ErrZombie)
	case s.Flags&pfKthread != 0:
		return fmt.Errorf("process %d %w", pid, ErrKernelThread)
	}
	return nil
}
