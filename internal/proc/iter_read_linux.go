package proc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// iterCreate is BPF_ITER_CREATE's attribute.
type iterCreate struct {
	linkFD, flags uint32
}

// linkCreateIter is BPF_LINK_CREATE's attribute for an iterator, and
// iterTaskInfo the task iterator's part of union bpf_iter_link_info.
type linkCreateIter struct {
	progFD, targetFD, attachType, flags uint32
	iterInfo                            uint64
	iterInfoLen                         uint32
	_                                   uint32
}

type iterTaskInfo struct {
	tid, pid, pidFD, _ uint32
}

const (
	bpfIterCreate = 33 // BPF_ITER_CREATE
	bpfLinkCreate = 28 // BPF_LINK_CREATE
)

// pidLink owns a link of the task iterator's program bound to one
// process's threads (the iterator's pid option, Linux 6.1). It is made by
// a raw bpf(2) call: cilium/ebpf's link.AttachIter takes no pid option,
// and the partial reads make and drop such links every refresh, where a
// raw call allocates nothing. Close releases it once.
type pidLink struct{ fd int }

// newPIDLink binds prog to the threads of pid.
func newPIDLink(prog *ebpf.Program, pid int32) (pidLink, error) {
	info := iterTaskInfo{pid: uint32(pid)}
	attr := linkCreateIter{progFD: uint32(prog.FD()), attachType: uint32(ebpf.AttachTraceIter),
		iterInfo: uint64(uintptr(unsafe.Pointer(&info))), iterInfoLen: uint32(unsafe.Sizeof(info))}
	fd, _, e := unix.RawSyscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return pidLink{fd: -1}, fmt.Errorf("task iterator: link for process %d: %w", pid, e)
	}
	return pidLink{fd: int(fd)}, nil
}

// Close releases the link.
func (l *pidLink) Close() error {
	if l.fd < 0 {
		return nil
	}
	err := rawClose(l.fd)
	l.fd = -1
	return err
}

// read runs the iterator over every task and parses its records into
// it.recs, sorted by TID. It counts its system calls in *reads.
func (it *taskIter) read(reads *int) error {
	it.recs, it.ext = it.recs[:0], it.ext[:0]
	if err := it.readLink(it.link.FD(), reads); err != nil {
		return err
	}
	it.finish()
	return nil
}

// readPartial reads the tasks of tids (through the TID reader, at most
// tidMax) and the threads of pids, through the iterator and a link of its
// own for each (kept until dropLinks), and parses their records as read
// does. A task or process that exited has none (one that reused its ID is
// told by its start time).
func (it *taskIter) readPartial(tids, pids []int32, reads *int) error {
	it.recs, it.ext = it.recs[:0], it.ext[:0]
	if len(tids) > 0 {
		if err := it.readTIDs(tids, reads); err != nil {
			return err
		}
	}
	for _, pid := range pids {
		l, ok := it.pidLinks[pid]
		if !ok {
			*reads++
			var err error
			if l, err = newPIDLink(it.prog, pid); err != nil {
				return err
			}
			it.pidLinks[pid] = l
		}
		if err := it.readLink(l.fd, reads); err != nil {
			return err
		}
	}
	it.finish()
	return nil
}

// dropLinks closes the per-process links of the PIDs keep rejects.
func (it *taskIter) dropLinks(keep func(pid int32) bool) {
	for pid, l := range it.pidLinks {
		if !keep(pid) {
			l.Close()
			delete(it.pidLinks, pid)
		}
	}
}

// readLink runs the iterator of the link linkFD and appends its records.
func (it *taskIter) readLink(linkFD int, reads *int) error {
	attr := iterCreate{linkFD: uint32(linkFD)}
	*reads++
	fd, _, e := unix.RawSyscall(unix.SYS_BPF, bpfIterCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return fmt.Errorf("task iterator: create: %w", e)
	}
	defer rawClose(int(fd))
	// The kernel's seq_file hands out whole records; a short tail would be
	// kept for the next read.
	have := 0
	for {
		if have == len(it.buf) {
			it.buf = append(it.buf, make([]byte, len(it.buf))...)
		}
		*reads++
		n, err := rawBuf(unix.SYS_READ, int(fd), it.buf[have:])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return fmt.Errorf("task iterator: read: %w", err)
		}
		if n == 0 {
			break
		}
		have += n
		used := it.parse(it.buf[:have])
		have = copy(it.buf, it.buf[used:have])
	}
	if have != 0 {
		return fmt.Errorf("task iterator: read: %d bytes left over", have)
	}
	return nil
}

// finish points the leaders' records at their extensions, sorts the
// records by TID and sums each process's threads into its leader's.
func (it *taskIter) finish() {
	// The extensions are in place: point the leaders' records at them.
	k := 0
	for i := range it.recs {
		if r := &it.recs[i]; r.tid == r.tgid {
			r.leader = &it.ext[k]
			k++
		}
	}
	// The kernel walks tasks by TID (and readPartial by process); sort
	// anyway should a kernel not.
	for i := 1; i < len(it.recs); i++ {
		if it.recs[i].tid < it.recs[i-1].tid {
			slices.SortFunc(it.recs, func(a, b iterRec) int { return int(a.tid - b.tid) })
			break
		}
	}
	it.sumThreads()
}

// parse appends the whole records at the start of b and returns the bytes
// they took.
func (it *taskIter) parse(b []byte) int {
	le := binary.NativeEndian
	u64 := func(r []byte, o int) uint64 { return le.Uint64(r[o:]) }
	used := 0
	for len(b)-used >= iterRecSize {
		r := b[used:]
		rec := iterRec{
			tid:    int32(le.Uint32(r[0:])),
			tgid:   int32(le.Uint32(r[4:])),
			run:    u64(r, 8),
			wait:   u64(r, 16),
			slices: u64(r, 24),
			nvcsw:  u64(r, 32),
			nivcsw: u64(r, 40),
			start:  u64(r, 48),
			utime:  u64(r, 56),
			stime:  u64(r, 64),
			prev:   cputime{u64(r, 72), u64(r, 80)},
			minFlt: u64(r, 88),
			majFlt: u64(r, 96),
			syscr:  u64(r, 104),
			syscw:  u64(r, 112),
			state:  stateLetter(le.Uint32(r[120:]), le.Uint32(r[124:])),
			cpu:    int32(le.Uint32(r[128:])),
			kernel: le.Uint32(r[132:])&pfKthreadFlag != 0,
		}
		copy(rec.comm[:], r[136:152])
		size := iterRecSize
		if rec.tid == rec.tgid {
			size += iterExtSize
			if len(r) < size {
				break
			}
			it.ext = append(it.ext, parseLeader(r[iterRecSize:size]))
		}
		it.recs = append(it.recs, rec)
		used += size
	}
	return used
}

// parseLeader decodes a leader's extension.
func parseLeader(e []byte) iterLeader {
	le := binary.NativeEndian
	u64 := func(o int) uint64 { return le.Uint64(e[o:]) }
	l := iterLeader{
		ppid:    int32(le.Uint32(e[0:])),
		threads: int32(le.Uint32(e[4:])),
		euid:    le.Uint32(e[32:]),
		utime:   u64(40),
		stime:   u64(48),
		run:     u64(56),
		prev:    cputime{u64(64), u64(72)},
		cutime:  u64(80),
		cstime:  u64(88),
		minFlt:  u64(96),
		majFlt:  u64(104),
		syscr:   u64(112),
		syscw:   u64(120),
		fdLimit: Unlimited,
	}
	if v := u64(128); v < uint64(Unlimited) {
		l.fdLimit = int64(v) // RLIM_INFINITY is all ones
	}
	for _, o := range []int{8, 16, 24} {
		if v := int64(u64(o)); v > 0 {
			l.rssPages += uint64(v)
		}
	}
	return l
}

// sumThreads adds every live thread's counters to its leader's extension,
// which then holds what the process's stat and io show: the counters of
// its exited threads (signal_struct's) plus its live ones'. A thread whose
// leader has no record (none in a live group; possible only as a race
// with exec) adds to nothing.
func (it *taskIter) sumThreads() {
	for i := range it.recs {
		r := &it.recs[i]
		l := r.leader
		if l == nil {
			if lr := it.find(r.tgid); lr != nil {
				l = lr.leader
			}
			if l == nil {
				continue
			}
		}
		l.utime += r.utime
		l.stime += r.stime
		l.run += r.run
		l.minFlt += r.minFlt
		l.majFlt += r.majFlt
		l.syscr += r.syscr
		l.syscw += r.syscw
	}
}

// name is the record's comm, up to its NUL.
func (r *iterRec) name() []byte {
	if i := bytes.IndexByte(r.comm[:], 0); i >= 0 {
		return r.comm[:i]
	}
	return r.comm[:]
}

// stateLetter is the state letter /proc shows for a task's __state and
// exit_state, as the kernel's task_state_index computes it (the TASK_*
// values of include/linux/sched.h, stable since 5.14 and 6.1).
func stateLetter(state, exit uint32) byte {
	const (
		report      = 0x7f   // TASK_REPORT
		idle        = 0x402  // TASK_IDLE: uninterruptible, no load
		rtlockWait  = 0x1000 // TASK_RTLOCK_WAIT
		frozen      = 0x8000 // TASK_FROZEN
		reportIdle  = 0x80   // TASK_REPORT_IDLE
		uninterrupt = 0x2
	)
	v := (state | exit) & report
	if state&idle == idle {
		v = reportIdle
	}
	if state&(rtlockWait|frozen) != 0 {
		v = uninterrupt
	}
	return "RSDTtXZPI"[bits.Len32(v)]
}

// close detaches the iterator (the kernel also does when gosleuth exits).
func (it *taskIter) close() {
	it.dropLinks(func(int32) bool { return false })
	if it.tids != nil {
		it.tids.close()
	}
	it.link.Close()
	it.prog.Close()
}

// find returns the record of tid, or nil.
func (it *taskIter) find(tid int32) *iterRec {
	i, ok := slices.BinarySearchFunc(it.recs, tid, func(r iterRec, tid int32) int { return int(r.tid - tid) })
	if !ok {
		return nil
	}
	return &it.recs[i]
}
