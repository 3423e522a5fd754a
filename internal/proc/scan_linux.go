//go:build linux

package proc

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// lastPIDMoved reports whether a process was created since the last scan,
// from the last field of /proc/loadavg ("0.53 0.14 0.05 1/77 1884"). Exits
// are noticed through ESRCH on the exited tasks' kept descriptors.
func (r *Reader) lastPIDMoved() bool {
	if r.loadfd < 0 {
		return true
	}
	r.stats.Reads++
	n, err := rawPread(r.loadfd, r.buf, 0)
	if err != nil || n == 0 {
		return true
	}
	b := trimSpace(r.buf[:n])
	i := len(b)
	for i > 0 && b[i-1] != ' ' {
		i--
	}
	v, ok := atou(b[i:])
	if !ok {
		return true
	}
	moved := v != r.lastPID
	r.lastPID = v
	return moved
}

// tgidOffset is where procfs's root directory lists PID 0: PID n is at
// position tgidOffset+n (fs/proc/base.c, TGID_OFFSET since Linux 3.17).
const tgidOffset = 258

// scanProc lists /proc with getdents64 and adds new processes. With from
// above 0, it lists PIDs from there up to r.lastPID only
// (Options.NewPIDsOnly) and leaves the others as they are.
func (r *Reader) scanProc(from int32) error {
	r.stats.Rescans++
	r.procScans++
	// Collect the PIDs first: adding a process lists its task directory
	// through the same buffer.
	if err := r.listPIDs(from); err != nil {
		return err
	}
	added := false
	for _, pid := range r.pids {
		if s, ok := r.slots[pid]; ok {
			s.seen = r.gen
			continue
		}
		if r.addSlot(pid) {
			added = true
		}
	}
	if from == 0 {
		for _, s := range r.order {
			if s.seen != r.gen {
				s.gone = true
			}
		}
	}
	if added {
		r.sortOrder()
	}
	return nil
}

// listPIDs lists the PIDs of /proc into r.pids: all of them, or with from
// above 0 those from there up to r.lastPID (Options.NewPIDsOnly).
func (r *Reader) listPIDs(from int32) error {
	off := int64(0)
	buf := r.dbuf
	if from > 0 {
		off = tgidOffset + int64(from)
		// The kernel renders as many entries as fit, and older processes
		// sit above the new PIDs once the counter has wrapped: read in
		// small steps and stop past the last PID.
		buf = r.dbuf[:1024]
	}
	if _, err := rawSeek(r.procfd, off, 0); err != nil {
		return fmt.Errorf("rewind %s: %w", r.root, err)
	}
	r.pids = r.pids[:0]
	for {
		r.stats.Reads++
		n, err := rawGetdents(r.procfd, buf)
		if err != nil {
			return fmt.Errorf("list %s: %w", r.root, err)
		}
		if n <= 0 {
			break
		}
		forEachNumericDirent(buf[:n], func(id uint64) { r.pids = append(r.pids, int32(id)) })
		if from > 0 && len(r.pids) > 0 && uint64(r.pids[len(r.pids)-1]) > r.lastPID {
			break
		}
	}
	r.stats.Listed += len(r.pids)
	return nil
}

// checkSeekScan reports whether listing the procfs root from a PID's
// position starts at that PID, as Options.NewPIDsOnly needs: the root is a
// procfs of this process's PID namespace (so /proc/loadavg's last PID is
// in its numbering) and the kernel places PIDs at tgidOffset.
func (r *Reader) checkSeekScan() bool {
	var sfs unix.Statfs_t
	if unix.Fstatfs(r.procfd, &sfs) != nil || sfs.Type != unix.PROC_SUPER_MAGIC || r.loadfd < 0 {
		return false
	}
	self, err := os.Readlink(r.root + "/self")
	if err != nil || self != strconv.Itoa(os.Getpid()) {
		return false
	}
	if _, err := rawSeek(r.procfd, tgidOffset+int64(os.Getpid()), 0); err != nil {
		return false
	}
	n, err := rawGetdents(r.procfd, r.dbuf)
	if err != nil || n <= 0 {
		return false
	}
	first := int32(-1)
	forEachNumericDirent(r.dbuf[:n], func(id uint64) {
		if first < 0 {
			first = int32(id)
		}
	})
	return first == int32(os.Getpid())
}

func (r *Reader) sortOrder() {
	slices.SortFunc(r.order, func(a, b *procSlot) int { return int(a.p.PID - b.p.PID) })
}

// forEachNumericDirent calls fn for each entry of a getdents64 buffer whose
// name is a decimal number.
func forEachNumericDirent(b []byte, fn func(uint64)) {
	for len(b) >= 19 {
		reclen := int(b[16]) | int(b[17])<<8
		if reclen < 19 || reclen > len(b) {
			return
		}
		name := b[19:reclen]
		end := 0
		for end < len(name) && name[end] != 0 {
			end++
		}
		if v, ok := atou(name[:end]); ok {
			fn(v)
		}
		b = b[reclen:]
	}
}
