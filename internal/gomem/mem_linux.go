//go:build linux

package gomem

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// vmReader reads with process_vm_readv: one system call for up to 1024
// buffers, no stop of the target, and the kernel's ptrace access check
// (PTRACE_MODE_ATTACH_REALCREDS) on every call.
type vmReader struct {
	pid   int
	local []unix.Iovec
	rem   []unix.RemoteIovec
}

func (r *vmReader) readv(bufs [][]byte, addrs []uint64) (int, error) {
	r.local, r.rem = r.local[:0], r.rem[:0]
	for i, b := range bufs {
		r.local = append(r.local, unix.Iovec{Base: unsafe.SliceData(b), Len: uint64(len(b))})
		r.rem = append(r.rem, unix.RemoteIovec{Base: uintptr(addrs[i]), Len: len(b)})
	}
	n, err := unix.ProcessVMReadv(r.pid, r.local, r.rem, 0)
	// Count the buffers filled completely: a partial read stops at the
	// first remote iovec the kernel could not read.
	full := 0
	for _, b := range bufs {
		if n < len(b) {
			break
		}
		n -= len(b)
		full++
	}
	if err != nil && full == 0 {
		if errors.Is(err, unix.EFAULT) {
			return 0, ErrBadAddress
		}
		return 0, fmt.Errorf("process_vm_readv: %w", err)
	}
	return full, nil
}

// openMem opens process pid's memory for reading: its readable mappings
// from maps (read again when the heap grows past them), reads by
// process_vm_readv.
func openMem(pfs proc.FS, pid int) (*Mem, []proc.Mapping, error) {
	maps, err := pfs.Maps(pid)
	if err != nil {
		return nil, nil, err
	}
	m := newMem(pid, readable(maps), &vmReader{pid: pid})
	m.reload = func() ([]region, error) {
		maps, err := pfs.Maps(pid)
		if err != nil {
			return nil, err
		}
		return readable(maps), nil
	}
	return m, maps, nil
}

func readable(maps []proc.Mapping) []region {
	var rs []region
	for _, mp := range maps {
		if mp.Read {
			rs = append(rs, region{mp.Start, mp.End})
		}
	}
	return rs
}

// monotonicNow reads the clock the runtime's nanotime reads
// (CLOCK_MONOTONIC), against which it stamps g.waitsince.
func monotonicNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}
