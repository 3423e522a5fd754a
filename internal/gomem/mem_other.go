//go:build !linux

package gomem

import (
	"errors"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// errNotLinux: another process's memory is read with Linux's
// process_vm_readv.
var errNotLinux = errors.New("reading another process's runtime needs Linux")

func openMem(pfs proc.FS, pid int) (*Mem, []proc.Mapping, error) {
	return nil, nil, errNotLinux
}

func monotonicNow() int64 { return 0 }
