package proc

import (
	"encoding/binary"
	"errors"
	"fmt"
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
}

// iterRecSize is the size of a record in the iterator's output.
const iterRecSize = 56

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
}

// newTaskIter loads the iterator program. With skipKernel, kernel threads
// are left out by the program itself.
func newTaskIter(skipKernel bool) (*taskIter, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("task iterator: kernel BTF: %w", err)
	}
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
	const frame = -iterRecSize
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
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.R6, 0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, frame),
		asm.Mov.Imm(asm.R3, iterRecSize),
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
	return &taskIter{prog: prog, link: l, buf: make([]byte, 64<<10)}, nil
}

// bpfErr says what a missing privilege means.
func bpfErr(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w (needs root, or CAP_BPF and CAP_PERFMON)", err)
	}
	return err
}

// fieldOffset finds a (nested) member of a struct: its offset in bytes and
// the width of a load of it.
func fieldOffset(s *btf.Struct, path ...string) (int16, asm.Size, error) {
	var off uint32
	var cur btf.Type = s
	for _, name := range path {
		st, ok := btf.UnderlyingType(cur).(*btf.Struct)
		if !ok {
			return 0, 0, fmt.Errorf("task iterator: task_struct.%v: %s is not in a struct", path, name)
		}
		var m *btf.Member
		for i := range st.Members {
			if st.Members[i].Name == name {
				m = &st.Members[i]
				break
			}
		}
		if m == nil || m.BitfieldSize != 0 || m.Offset%8 != 0 {
			return 0, 0, fmt.Errorf("task iterator: task_struct has no field %v this kernel", path)
		}
		off += m.Offset.Bytes()
		cur = m.Type
	}
	n, err := btf.Sizeof(cur)
	if err != nil {
		return 0, 0, fmt.Errorf("task iterator: task_struct.%v: %w", path, err)
	}
	if off > 1<<15-8 {
		return 0, 0, fmt.Errorf("task iterator: task_struct.%v at offset %d, beyond a load's reach", path, off)
	}
	switch n {
	case 4:
		return int16(off), asm.Word, nil
	case 8:
		return int16(off), asm.DWord, nil
	}
	return 0, 0, fmt.Errorf("task iterator: task_struct.%v is %d bytes wide", path, n)
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
	it.recs = it.recs[:0]
	// A record never straddles two reads: the kernel's seq_file hands out
	// whole records, and a short tail is kept for the next read.
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
		full := have - have%iterRecSize
		it.parse(it.buf[:full])
		have = copy(it.buf, it.buf[full:have])
	}
	if have != 0 {
		return fmt.Errorf("task iterator: read: %d bytes left over", have)
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

// parse appends the records of b, a whole number of them.
func (it *taskIter) parse(b []byte) {
	le := binary.NativeEndian
	for ; len(b) >= iterRecSize; b = b[iterRecSize:] {
		it.recs = append(it.recs, iterRec{
			tid:    int32(le.Uint32(b[0:])),
			tgid:   int32(le.Uint32(b[4:])),
			run:    le.Uint64(b[8:]),
			wait:   le.Uint64(b[16:]),
			slices: le.Uint64(b[24:]),
			nvcsw:  le.Uint64(b[32:]),
			nivcsw: le.Uint64(b[40:]),
			start:  le.Uint64(b[48:]),
		})
	}
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
