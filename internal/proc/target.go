package proc

import (
	"bytes"
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
	if statExited(b) {
		return fmt.Errorf("process %d %w", pid, ErrZombie)
	}
	var s statFields
	if err := parseStat(b, &s); err != nil {
		return fmt.Errorf("read process %d: %w", pid, err)
	}
	if s.Flags&pfKthread != 0 {
		return fmt.Errorf("process %d %w", pid, ErrKernelThread)
	}
	return nil
}

// statExited reports whether a stat line's state is zombie or dead. The
// state follows the last ')' (a comm may hold parentheses); it is read
// before the rest, so a zombie is told even from a short stat line.
func statExited(b []byte) bool {
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// Identity is what tells one process from another that later has its PID,
// and an exec from the program before it.
type Identity struct {
	// StartTime is when the process started, in ClockTicks after boot.
	StartTime uint64
	// Exe is where /proc/PID/exe points ("" when unreadable).
	Exe string
}

// ReadIdentity reads pid's Identity under the proc mount root.
func ReadIdentity(root string, pid int) (Identity, error) {
	if root == "" {
		root = "/proc"
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, fmt.Errorf("process %d %w", pid, ErrProcessGone)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	var s statFields
	if err := parseStat(b, &s); err != nil {
		return Identity{}, fmt.Errorf("read process %d: %w", pid, err)
	}
	exe, _ := os.Readlink(filepath.Join(dir, "exe"))
	return Identity{StartTime: s.StartTime, Exe: exe}, nil
}
