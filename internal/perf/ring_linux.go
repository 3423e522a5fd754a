//go:build linux

package perf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// recordHeaderSize is sizeof(struct perf_event_header).
const recordHeaderSize = 8

// Ring is one perf event with its mmapped ring buffer: a metadata page
// followed by a power-of-two number of data pages the kernel writes records
// into. It reads records with the ordering the kernel's ABI asks for
// (load data_head with acquire semantics, consume, then store data_tail with
// release semantics) and copies a record that wraps around the end of the
// buffer into a scratch buffer, so callers always see it whole.
//
// A Ring is not safe for concurrent use; Close it when done.
type Ring struct {
	fd      int
	mem     []byte
	meta    *unix.PerfEventMmapPage
	data    []byte
	scratch []byte
	lost    uint64
	records uint64
}

// OpenRing opens the event described by attr on thread tid (any CPU, see
// OpenTask) and maps pages data pages for its records (rounded up to a power
// of two, at least 1). The event starts disabled if attr says so; call
// Enable. Events inherited by children (attr inherit bit) cannot be mapped:
// the kernel answers EINVAL, so open one Ring per thread instead.
func OpenRing(attr *unix.PerfEventAttr, tid, pages int) (*Ring, error) {
	fd, err := OpenTask(attr, tid, -1)
	if err != nil {
		return nil, err
	}
	r, err := MapRing(fd, pages)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map ring of thread %d: %w", tid, err)
	}
	return r, nil
}

// MapRing maps the ring buffer of an already open perf event descriptor fd
// (pages data pages, rounded up to a power of two) and takes ownership of
// fd: Close closes it.
func MapRing(fd, pages int) (*Ring, error) {
	n := 1
	for n < pages {
		n <<= 1
	}
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (n+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %d pages of perf event: %w", n+1, err)
	}
	meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := uint64(ps), uint64(n*ps)
	// Kernels since 4.1 say where the data area is; older ones put it
	// right after the metadata page.
	if meta.Data_offset != 0 && meta.Data_size != 0 {
		off, size = meta.Data_offset, meta.Data_size
	}
	return &Ring{fd: fd, mem: mem, meta: meta, data: mem[off : off+size]}, nil
}

// OpenCPURings opens the event described by attr once on every online CPU,
// for every task, each with pages data pages mapped (see MapRing). The
// rings start as attr says (disabled: call Enable). When any CPU fails,
// the rings opened so far are closed and the error names that CPU.
func OpenCPURings(attr *unix.PerfEventAttr, pages int) ([]*Ring, error) {
	cpus, err := proc.OnlineCPUs()
	if err != nil {
		return nil, err
	}
	attr.Size = uint32(unsafe.Sizeof(*attr))
	var rings []*Ring
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		var r *Ring
		if err == nil {
			if r, err = MapRing(fd, pages); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			for _, r := range rings {
				r.Close()
			}
			return nil, fmt.Errorf("open perf event on CPU %d: %w", cpu, err)
		}
		rings = append(rings, r)
	}
	return rings, nil
}

// FD returns the event's file descriptor (for ioctls or poll).
func (r *Ring) FD() int { return r.fd }

// Enable starts counting and sampling.
func (r *Ring) Enable() error {
	if err := unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("enable perf event: %w", err)
	}
	return nil
}

// Disable stops it; records already written stay readable.
func (r *Ring) Disable() error {
	if err := unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
		return fmt.Errorf("disable perf event: %w", err)
	}
	return nil
}

// Lost returns how many records the kernel dropped because the ring was
// full, from the PERF_RECORD_LOST records read so far.
func (r *Ring) Lost() uint64 { return r.lost }

// Records returns how many records Read has passed to its callbacks.
func (r *Ring) Records() uint64 { return r.records }

// Fill is the share of the ring's data pages holding records not yet
// read: a reader that finds it high polls too seldom to keep up.
func (r *Ring) Fill() float64 {
	if len(r.data) == 0 {
		return 0
	}
	head := atomic.LoadUint64(&r.meta.Data_head)
	return float64(head-r.meta.Data_tail) / float64(len(r.data))
}

// Wait blocks until the ring has data to read (as set by the attr's wakeup
// fields), the event's thread exits (POLLHUP), or timeout passes. It reports
// whether the descriptor became ready.
func (r *Ring) Wait(timeout time.Duration) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(timeout.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll perf event: %w", err)
		}
		return n > 0, nil
	}
}

// Read passes every record written since the last Read to fn, oldest first,
// with its type (PERF_RECORD_*), misc flags and body (the bytes after the
// 8-byte header). body is only valid during the call. PERF_RECORD_LOST
// records are counted (see Lost) and passed on too. Read returns the number
// of records passed.
func (r *Ring) Read(fn func(typ uint32, misc uint16, body []byte)) int {
	head := atomic.LoadUint64(&r.meta.Data_head) // acquire: records up to head are written
	tail := r.meta.Data_tail
	var n int
	tail, n, r.scratch = readRecords(r.data, head, tail, r.scratch, func(typ uint32, misc uint16, body []byte) {
		if typ == unix.PERF_RECORD_LOST && len(body) >= 16 {
			r.lost += binary.NativeEndian.Uint64(body[8:])
		}
		fn(typ, misc, body)
	})
	r.records += uint64(n)
	atomic.StoreUint64(&r.meta.Data_tail, tail) // release: the kernel may reuse the space
	return n
}

// Close unmaps the ring and closes the event.
func (r *Ring) Close() error {
	var errs []error
	if r.mem != nil {
		if err := unix.Munmap(r.mem); err != nil {
			errs = append(errs, fmt.Errorf("unmap perf ring: %w", err))
		}
		r.mem, r.meta, r.data = nil, nil, nil
	}
	if r.fd >= 0 {
		if err := unix.Close(r.fd); err != nil {
			errs = append(errs, fmt.Errorf("close perf event: %w", err))
		}
		r.fd = -1
	}
	return errors.Join(errs...)
}

// readRecords walks the records in data (a power-of-two ring) from tail up
// to head, which are free-running byte counters, and returns the new tail,
// the number of records and the (possibly grown) scratch buffer used for
// records that wrap. A truncated or zero-sized header, or counters more
// than a ring apart, stop the walk at head so a corrupt ring cannot loop.
func readRecords(data []byte, head, tail uint64, scratch []byte, fn func(uint32, uint16, []byte)) (uint64, int, []byte) {
	size := uint64(len(data))
	mask := size - 1
	n := 0
	if head-tail > size {
		// The ring never holds more than its size: counters this far
		// apart are corrupt, and walking them would lap the ring
		// (for up to 2^64 bytes).
		return head, 0, scratch
	}
	for head-tail >= recordHeaderSize {
		var hdr [recordHeaderSize]byte
		copyRing(hdr[:], data, tail&mask)
		typ := binary.NativeEndian.Uint32(hdr[0:])
		misc := binary.NativeEndian.Uint16(hdr[4:])
		rsize := uint64(binary.NativeEndian.Uint16(hdr[6:]))
		if rsize < recordHeaderSize || rsize > head-tail {
			return head, n, scratch
		}
		start := (tail + recordHeaderSize) & mask
		blen := rsize - recordHeaderSize
		var body []byte
		if start+blen <= size {
			body = data[start : start+blen]
		} else {
			if uint64(cap(scratch)) < blen {
				scratch = make([]byte, blen)
			}
			body = scratch[:blen]
			copyRing(body, data, start)
		}
		fn(typ, misc, body)
		n++
		tail += rsize
	}
	return tail, n, scratch
}

// copyRing copies len(dst) bytes from ring data starting at offset off,
// wrapping at the end.
func copyRing(dst, data []byte, off uint64) {
	k := copy(dst, data[off:])
	copy(dst[k:], data)
}
