//go:build !linux

package proc

import "os/exec"

// Launched is a command started stopped; unsupported on this OS.
type Launched struct {
	Cmd *exec.Cmd
}

// StartStopped fails: it needs Linux.
func StartStopped(*exec.Cmd) (*Launched, error) { return nil, ErrNotSupported }

// Resume does nothing.
func (l *Launched) Resume() error { return nil }
