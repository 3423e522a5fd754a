package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime/debug"
	"slices"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// A task iterator (Options.TasksFromBPF) reads every thread's scheduler
// counters with one BPF program run by the kernel over its task list: one
// read(2) of an iterator descriptor returns a fixed-size binary record per
// thread, where /proc costs a pread of schedstat per thread to learn which
// ran, then a status read (or a taskstats answer) for each that did, and a
// getdents listing of /proc to find new processes. The kernel renders no
// text and gosleuth parses none.
//
// The program is written with cilium/ebpf's assembler rather than compiled
// from C, as the syscall counters are: it only copies fields, and their
// offsets in struct task_struct are looked up in the running kernel's BTF
// when the reader starts, so one binary serves every kernel (the fields
// are read through BTF-typed pointers, which the verifier checks against
// that same BTF).

// iterRec is one thread's record, as the program writes it.
type iterRec struct {
	tid, tgid     int32
	run, wait     uint64 // se.sum_exec_runtime, sched_info.run_delay (ns)
	slices        uint64 // sched_info.pcount: timeslices run
	nvcsw, nivcsw uint64
	start         uint64 // start_boottime (ns): tells a reused TID
	// A thread group leader's record carries what a process's stat gives
	// at first sight but its CPU times (iterLeader), when the kernel's BTF
	// has the fields (taskIter.leaders).
	leader *iterLeader
}

// iterLeader is the extension of a leader's record.
type iterLeader struct {
	comm     [16]byte
	state    byte // as /proc shows it: R, S, D...
	ppid     int32
	threads  int32
	rssPages uint64
	euid     uint32
}

// iterRecSize is the size of a record in the iterator's output, and
// iterExtSize that of a leader's extension, which follows it.
const (
	iterRecSize = 56
	iterExtSize = 64
)

// pfKthreadFlag is PF_KTHREAD in task_struct.flags.
const pfKthreadFlag = 0x00200000

// iterField is one task_struct field the program copies to a record.
type iterField struct {
	path []string
	at   int16 // offset in the record
}

var iterFields = []iterField{
	{[]string{"pid"}, 0},
	{[]string{"tgid"}, 4},
	{[]string{"se", "sum_exec_runtime"}, 8},
	{[]string{"sched_info", "run_delay"}, 16},
	{[]string{"sched_info", "pcount"}, 24},
	{[]string{"nvcsw"}, 32},
	{[]string{"nivcsw"}, 40},
	{[]string{"start_boottime"}, 48},
}

// taskIter is a loaded and attached task iterator.
type taskIter struct {
	prog *ebpf.Program
	link *link.Iter
	buf  []byte
	recs []iterRec
	// leaders: leaders' records are extended; ext holds the extensions of
	// the last read, which recs point into.
	leaders bool
	ext     []iterLeader
	// leadersOff says why leaders' records are not extended.
	leadersOff string
}

// newTaskIter loads the iterator program. With skipKernel, kernel threads
// are left out by the program itself. With leaders, a thread group
// leader's record is extended where the kernel's BTF allows
// (taskIter.leaders says whether it is).
func newTaskIter(skipKernel, leaders bool) (*taskIter, error) {
	// A map of one entry tells in microseconds whether bpf(2) is allowed
	// here, before 30 ms of BTF are spent on a program that could not load.
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("task iterator: %w", bpfErr(err))
	}
	m.Close()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("task iterator: kernel BTF: %w", err)
	}
	// Loading the program decodes struct task_struct and every type it
	// reaches from the kernel's BTF: about 10 MB of heap, garbage once
	// loaded. Returned to the system at once, it neither raises the peak
	// RSS of a long-running view (the exporter's was 30.6 MB instead of
	// 21 MB) nor the heap goal the collector works to.
	defer debug.FreeOSMemory()
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return nil, fmt.Errorf("task iterator: kernel BTF: %w", err)
	}
	// R6: the iterator's meta (its seq_file at offset 0), R7: the task,
	// NULL once after the last one. The record is built on the stack.
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord),
		asm.LoadMem(asm.R7, asm.R1, 8, asm.DWord),
		asm.JEq.Imm(asm.R7, 0, "out"),
	}
	if skipKernel {
		off, size, err := fieldOffset(task, "flags")
		if err != nil {
			return nil, err
		}
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R7, off, size),
			asm.And.Imm(asm.R2, pfKthreadFlag),
			asm.JNE.Imm(asm.R2, 0, "out"),
		)
	}
	// The record, and a leader's extension after it, are built at frame.
	const frame = -(iterRecSize + iterExtSize)
	for _, f := range iterFields {
		off, size, err := fieldOffset(task, f.path...)
		if err != nil {
			return nil, err
		}
		store := asm.DWord
		if f.at < 8 {
			store = asm.Word
		}
		if size != store {
			return nil, fmt.Errorf("task iterator: task_struct.%v is %d bytes wide, want %d", f.path, size.Sizeof(), store.Sizeof())
		}
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R7, off, size),
			asm.StoreMem(asm.RFP, frame+f.at, asm.R2, store),
		)
	}
	it := &taskIter{buf: make([]byte, 64<<10)}
	if leaders {
		ext, err := leaderInsns(spec, task, frame)
		if err != nil {
			it.leadersOff = err.Error()
		} else {
			insns = append(insns, ext...)
			it.leaders = true
		}
	}
	if !it.leaders {
		insns = append(insns, asm.Mov.Imm(asm.R3, iterRecSize))
	}
	// R3: the length to write.
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord).WithSymbol("write"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, frame),
		asm.FnSeqWrite.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "gosleuth_tasks",
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceIter,
		AttachTo:     "task",
		Instructions: insns,
		License:      "GPL",
	}, ebpf.ProgramOptions{KernelTypes: spec})
	if err != nil {
		return nil, fmt.Errorf("task iterator: load: %w", bpfErr(err))
	}
	l, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("task iterator: attach: %w", bpfErr(err))
	}
	it.prog, it.link = prog, l
	return it, nil
}

// The extension of a leader's record (iterExtSize bytes after the record):
//
//	0  comm[16]
//	16 __state (u32)      20 exit_state (u32)
//	24 real_parent->tgid  28 signal->nr_threads
//	32 mm->rss_stat: file, anon and shmem pages (3 x s64; 0 without mm)
//	56 cred->euid (u32)   60 zero
//
// leaderInsns returns the code that, for a leader (pid == tgid), fills it
// at frame+iterRecSize and writes record and extension, and for any other
// thread falls through to write the record alone.
func leaderInsns(spec *btf.Spec, task *btf.Struct, frame int16) (asm.Instructions, error) {
	var sigS, mmS, pcS, credS *btf.Struct
	for _, x := range []struct {
		dst  **btf.Struct
		name string
	}{{&sigS, "signal_struct"}, {&mmS, "mm_struct"}, {&pcS, "percpu_counter"}, {&credS, "cred"}} {
		if err := spec.TypeByName(x.name, x.dst); err != nil {
			return nil, fmt.Errorf("task iterator: kernel BTF: %s: %w", x.name, err)
		}
	}
	type field struct {
		st    *btf.Struct
		path  []string
		width int // 0: a pointer or array, width not checked
	}
	offs := map[string]int16{}
	for key, f := range map[string]field{
		"pid": {task, []string{"pid"}, 4}, "tgid": {task, []string{"tgid"}, 4}, "comm": {task, []string{"comm"}, 16},
		"state": {task, []string{"__state"}, 4}, "exit": {task, []string{"exit_state"}, 4},
		"parent": {task, []string{"real_parent"}, 8}, "signal": {task, []string{"signal"}, 8},
		"mm": {task, []string{"mm"}, 8}, "cred": {task, []string{"cred"}, 8},
		"threads": {sigS, []string{"nr_threads"}, 4}, "rss": {mmS, []string{"rss_stat"}, 0},
		"count": {pcS, []string{"count"}, 8}, "euid": {credS, []string{"euid"}, 4},
	} {
		o, n, err := memberOffset(f.st, f.path...)
		if err != nil {
			return nil, err
		}
		if f.width != 0 && n != f.width {
			return nil, fmt.Errorf("task iterator: %s.%v is %d bytes wide, want %d", f.st.Name, f.path, n, f.width)
		}
		offs[key] = o
	}
	pcSize, err := btf.Sizeof(pcS)
	if err != nil {
		return nil, fmt.Errorf("task iterator: percpu_counter: %w", err)
	}
	// MM_FILEPAGES, MM_ANONPAGES and MM_SHMEMPAGES are 0, 1 and 3 in
	// every kernel whose rss_stat is an array of percpu_counter (6.2 and
	// later); /proc's RSS is their sum, each read as its counter's count
	// (clamped at 0 in Go), as get_mm_counter does.
	rssAt := func(i int) int16 { return offs["rss"] + int16(i*pcSize) + offs["count"] }
	x := func(o int16) int16 { return frame + iterRecSize + o }
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R7, offs["tgid"], asm.Word),
		asm.LoadMem(asm.R4, asm.R7, offs["pid"], asm.Word),
		asm.Mov.Imm(asm.R3, iterRecSize),
		asm.JNE.Reg(asm.R2, asm.R4, "write"),
		asm.LoadMem(asm.R2, asm.R7, offs["comm"], asm.DWord),
		asm.StoreMem(asm.RFP, x(0), asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, asm.R7, offs["comm"]+8, asm.DWord),
		asm.StoreMem(asm.RFP, x(8), asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, asm.R7, offs["state"], asm.Word),
		asm.StoreMem(asm.RFP, x(16), asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R7, offs["exit"], asm.Word),
		asm.StoreMem(asm.RFP, x(20), asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R7, offs["parent"], asm.DWord),
		asm.LoadMem(asm.R2, asm.R2, offs["tgid"], asm.Word),
		asm.StoreMem(asm.RFP, x(24), asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R7, offs["signal"], asm.DWord),
		asm.LoadMem(asm.R2, asm.R2, offs["threads"], asm.Word),
		asm.StoreMem(asm.RFP, x(28), asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R7, offs["cred"], asm.DWord),
		asm.LoadMem(asm.R2, asm.R2, offs["euid"], asm.Word),
		asm.StoreMem(asm.RFP, x(56), asm.R2, asm.Word),
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, x(60), asm.R2, asm.Word),
		asm.StoreMem(asm.RFP, x(32), asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, x(40), asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, x(48), asm.R2, asm.DWord),
		asm.Mov.Imm(asm.R3, iterRecSize+iterExtSize),
		asm.LoadMem(asm.R4, asm.R7, offs["mm"], asm.DWord),
		asm.JEq.Imm(asm.R4, 0, "write"),
		asm.LoadMem(asm.R2, asm.R4, rssAt(0), asm.DWord),
		asm.StoreMem(asm.RFP, x(32), asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, asm.R4, rssAt(1), asm.DWord),
		asm.StoreMem(asm.RFP, x(40), asm.R2, asm.DWord),
		asm.LoadMem(asm.R2, asm.R4, rssAt(3), asm.DWord),
		asm.StoreMem(asm.RFP, x(48), asm.R2, asm.DWord),
	}, nil
}

// bpfErr says what a missing privilege means, in place of cilium/ebpf's
// longer message (which suggests the memlock limit, not the cause here).
func bpfErr(err error) error {
	for _, e := range []unix.Errno{unix.EPERM, unix.EACCES} {
		if errors.Is(err, e) {
			return fmt.Errorf("bpf(2): %w (needs root, or CAP_BPF and CAP_PERFMON)", e)
		}
	}
	return err
}

// fieldOffset finds a (nested) member of a struct: its offset in bytes and
// the width of a load of it.
func fieldOffset(s *btf.Struct, path ...string) (int16, asm.Size, error) {
	off, n, err := memberOffset(s, path...)
	if err != nil {
		return 0, 0, err
	}
	switch n {
	case 4:
		return off, asm.Word, nil
	case 8:
		return off, asm.DWord, nil
	}
	return 0, 0, fmt.Errorf("task iterator: %s.%v is %d bytes wide", s.Name, path, n)
}

// memberOffset finds a (nested) member of a struct: its offset and size in
// bytes.
func memberOffset(s *btf.Struct, path ...string) (int16, int, error) {
	var off uint32
	var cur btf.Type = s
	for _, name := range path {
		m, at := findMember(cur, name)
		if m == nil || m.BitfieldSize != 0 || at%8 != 0 {
			return 0, 0, fmt.Errorf("task iterator: %s has no field %v in this kernel", s.Name, path)
		}
		off += at / 8
		cur = m.Type
	}
	n, err := btf.Sizeof(cur)
	if err != nil {
		return 0, 0, fmt.Errorf("task iterator: %s.%v: %w", s.Name, path, err)
	}
	if off > 1<<15-64 {
		return 0, 0, fmt.Errorf("task iterator: %s.%v at offset %d, beyond a load's reach", s.Name, path, off)
	}
	return int16(off), n, nil
}

// findMember finds a member of a struct or union by name, looking into its
// anonymous members (mm_struct keeps its fields in one), and returns it
// with its offset in bits.
func findMember(t btf.Type, name string) (*btf.Member, uint32) {
	var members []btf.Member
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = u.Members
	case *btf.Union:
		members = u.Members
	default:
		return nil, 0
	}
	for i := range members {
		m := &members[i]
		if m.Name == name {
			return m, uint32(m.Offset)
		}
	}
	for i := range members {
		m := &members[i]
		if m.Name != "" {
			continue
		}
		if found, at := findMember(m.Type, name); found != nil {
			return found, uint32(m.Offset) + at
		}
	}
	return nil, 0
}

// iterCreate is BPF_ITER_CREATE's attribute.
type iterCreate struct {
	linkFD, flags uint32
}

const bpfIterCreate = 33 // BPF_ITER_CREATE

// read runs the iterator and parses its records into it.recs, sorted by
// TID. It counts its system calls in *reads.
func (it *taskIter) read(reads *int) error {
	attr := iterCreate{linkFD: uint32(it.link.FD())}
	fd, _, e := unix.RawSyscall(unix.SYS_BPF, bpfIterCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if e != 0 {
		return fmt.Errorf("task iterator: create: %w", e)
	}
	defer rawClose(int(fd))
	it.recs, it.ext = it.recs[:0], it.ext[:0]
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
	// The extensions are in place: point the leaders' records at them.
	k := 0
	for i := range it.recs {
		if r := &it.recs[i]; it.leaders && r.tid == r.tgid {
			r.leader = &it.ext[k]
			k++
		}
	}
	// The kernel walks tasks by TID; sort anyway should a kernel not.
	for i := 1; i < len(it.recs); i++ {
		if it.recs[i].tid < it.recs[i-1].tid {
			slices.SortFunc(it.recs, func(a, b iterRec) int { return int(a.tid - b.tid) })
			break
		}
	}
	return nil
}

// parse appends the whole records at the start of b and returns the bytes
// they took.
func (it *taskIter) parse(b []byte) int {
	le := binary.NativeEndian
	used := 0
	for len(b)-used >= iterRecSize {
		r := b[used:]
		rec := iterRec{
			tid:    int32(le.Uint32(r[0:])),
			tgid:   int32(le.Uint32(r[4:])),
			run:    le.Uint64(r[8:]),
			wait:   le.Uint64(r[16:]),
			slices: le.Uint64(r[24:]),
			nvcsw:  le.Uint64(r[32:]),
			nivcsw: le.Uint64(r[40:]),
			start:  le.Uint64(r[48:]),
		}
		size := iterRecSize
		if it.leaders && rec.tid == rec.tgid {
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
	var l iterLeader
	copy(l.comm[:], e[:16])
	l.state = stateLetter(le.Uint32(e[16:]), le.Uint32(e[20:]))
	l.ppid = int32(le.Uint32(e[24:]))
	l.threads = int32(le.Uint32(e[28:]))
	for _, o := range []int{32, 40, 48} {
		if v := int64(le.Uint64(e[o:])); v > 0 {
			l.rssPages += uint64(v)
		}
	}
	l.euid = le.Uint32(e[56:])
	return l
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
