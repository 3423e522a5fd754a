//go:build !linux

package syscalls

import "io"

// startSession needs Linux: elsewhere it returns ErrNotSupported.
func startSession(Config, io.Writer, io.Writer) (*Session, error) {
	return nil, ErrNotSupported
}
