//go:build unix

package atomicfile

import "golang.org/x/sys/unix"

func accessW(path string) error { return unix.Access(path, unix.W_OK) }
