package proc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
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

// iterRec is one thread's record, as the program writes it: what the
// thread's schedstat, status and stat show, unrendered.
type iterRec struct {
	tid, tgid     int32
	run, wait     uint64 // se.sum_exec_runtime, sched_info.run_delay (ns)
	slices        uint64 // sched_info.pcount: timeslices run
	nvcsw, nivcsw uint64
	start         uint64 // start_boottime (ns): tells a reused TID
	// utime and stime are the tick-sampled user and system time (ns),
	// prev the kernel's last split of run time between them (see
	// cputime.adjust); zero where the kernel keeps none.
	utime, stime   uint64
	prev           cputime
	minFlt, majFlt uint64
	// syscr and syscw count read- and write-like system calls (ioac; zero
	// without taskIter.io).
	syscr, syscw uint64
	state        byte // as /proc shows it: R, S, D...
	kernel       bool
	cpu          int32
	comm         [16]byte
	// leader is the extension of a thread group leader's record.
	leader *iterLeader
}

// iterLeader is the extension of a leader's record: the process's own
// fields, and its counters that stat and io show summed over its threads.
// The program writes the counters of the threads that exited (kept in
// signal_struct); read adds those of every live thread's record.
type iterLeader struct {
	ppid, threads int32
	rssPages      uint64
	euid          uint32
	// utime, stime and run as iterRec's, summed; cutime and cstime the
	// waited-for children's (ns).
	utime, stime, run uint64
	prev              cputime
	cutime, cstime    uint64
	minFlt, majFlt    uint64
	syscr, syscw      uint64
	// fdLimit is the soft RLIMIT_NOFILE (Unlimited when unlimited).
	fdLimit int64
}

// iterRecSize is the size of a record in the iterator's output, and
// iterExtSize that of a leader's extension, which follows it.
const (
	iterRecSize = 152
	iterExtSize = 136
)

// rlimitNoFile is RLIMIT_NOFILE's index in signal_struct.rlim.
const rlimitNoFile = 7

// pfKthreadFlag is PF_KTHREAD in task_struct.flags.
const pfKthreadFlag = 0x00200000

// A record's layout (offsets in bytes):
//
//	0   pid, tgid (u32)       8   se.sum_exec_runtime  16 sched_info.run_delay
//	24  sched_info.pcount     32  nvcsw                40 nivcsw
//	48  start_boottime        56  utime                64 stime
//	72  prev_cputime.utime    80  prev_cputime.stime   88 min_flt
//	96  maj_flt               104 ioac.syscr           112 ioac.syscw
//	120 __state (u32)         124 exit_state (u32)     128 cpu (u32)
//	132 flags (u32)           136 comm[16]
//
// and a leader's extension, after it:
//
//	0   real_parent->tgid, signal->nr_threads (u32)
//	8   mm->rss_stat: file, anon and shmem pages (3 x s64; 0 without mm)
//	32  cred->euid (u32), zero (u32)
//	40  signal->: utime, stime, sum_sched_runtime, prev_cputime.utime,
//	    prev_cputime.stime, cutime, cstime, min_flt, maj_flt, ioac.syscr,
//	    ioac.syscw (11 x u64)
//	128 signal->rlim[RLIMIT_NOFILE].rlim_cur

// recField is a field the program copies into a record: from the struct
// at base (a register holding a pointer to it), the first of paths that
// the kernel's BTF has, to offset at. A field of an optional group that
// is missing is written as zero, and the group noted as missing.
type recField struct {
	base  asm.Register
	st    *btf.Struct
	paths [][]string
	at    int16
	width int // bytes: 4, 8 or 16 (comm)
	group string
}

// progBuilder assembles a program that copies tasks into records: the
// record is written at frame bytes from the register dst (the frame
// pointer, or a map value's).
type progBuilder struct {
	insns   asm.Instructions
	missing map[string]bool
	dst     asm.Register
}

// copy appends the loads and stores of f, relative to the record at frame.
func (b *progBuilder) copy(f recField, frame int16) error {
	var off int16
	var err error
	for _, path := range f.paths {
		if off, err = memberAt(f.st, f.width, path...); err == nil {
			break
		}
	}
	if err != nil {
		if f.group == "" {
			return err
		}
		b.missing[f.group] = true
		size := asm.DWord
		if f.width == 4 {
			size = asm.Word
		}
		b.insns = append(b.insns, asm.Mov.Imm(asm.R2, 0))
		for w := 0; w < f.width; w += size.Sizeof() {
			b.insns = append(b.insns, asm.StoreMem(b.dst, frame+f.at+int16(w), asm.R2, size))
		}
		return nil
	}
	switch f.width {
	case 4:
		b.insns = append(b.insns,
			asm.LoadMem(asm.R2, f.base, off, asm.Word),
			asm.StoreMem(b.dst, frame+f.at, asm.R2, asm.Word))
	default:
		for w := 0; w < f.width; w += 8 {
			b.insns = append(b.insns,
				asm.LoadMem(asm.R2, f.base, off+int16(w), asm.DWord),
				asm.StoreMem(b.dst, frame+f.at+int16(w), asm.R2, asm.DWord))
		}
	}
	return nil
}

// taskIter is a loaded and attached task iterator.
type taskIter struct {
	prog *ebpf.Program
	link *link.Iter
	buf  []byte
	recs []iterRec
	// ext holds the leaders' extensions of the last read, which recs
	// point into.
	ext []iterLeader
	// io: the kernel keeps per-task syscall counts (CONFIG_TASK_XACCT),
	// and records carry them.
	io bool
	// pidLinks are links of the same program bound to one process's
	// threads (the iterator's pid option, Linux 6.1), by PID: readPartial
	// keeps those of the processes it reads until dropLinks.
	pidLinks map[int32]int
	// tids reads tasks by TID (nil where it could not load: tidOff says
	// why).
	tids   *tidReader
	tidOff string
}

// newTaskIter loads the iterator program. With skipKernel, kernel threads
// are left out by the program itself.
func newTaskIter(skipKernel bool) (*taskIter, error) {
	// A map of one entry tells in microseconds whether bpf(2) is allowed
	// here, before 30 ms of BTF are spent on a program that could not load.
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("task iterator: %w", BPFErr(err))
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
	var task, sig, mm, pc, cred *btf.Struct
	for _, x := range []struct {
		dst  **btf.Struct
		name string
	}{{&task, "task_struct"}, {&sig, "signal_struct"}, {&mm, "mm_struct"}, {&pc, "percpu_counter"}, {&cred, "cred"}} {
		if err := spec.TypeByName(x.name, x.dst); err != nil {
			return nil, fmt.Errorf("task iterator: kernel BTF: %s: %w", x.name, err)
		}
	}
	kt := kernelTypes{task, sig, mm, pc, cred}
	b := &progBuilder{missing: map[string]bool{}, dst: asm.RFP}
	// R6: the iterator's meta (its seq_file at offset 0), R7: the task,
	// NULL once after the last one. The record, and a leader's extension
	// after it, are built on the stack at frame.
	const frame = -(iterRecSize + iterExtSize)
	b.insns = asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 0, asm.DWord),
		asm.LoadMem(asm.R7, asm.R1, 8, asm.DWord),
		asm.JEq.Imm(asm.R7, 0, "out"),
	}
	if skipKernel {
		flags, err := memberAt(task, 4, "flags")
		if err != nil {
			return nil, err
		}
		b.insns = append(b.insns,
			asm.LoadMem(asm.R2, asm.R7, flags, asm.Word),
			asm.And.Imm(asm.R2, pfKthreadFlag),
			asm.JNE.Imm(asm.R2, 0, "out"),
		)
	}
	if err := b.taskBody(spec, kt, frame); err != nil {
		return nil, err
	}
	b.insns = append(b.insns,
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
		Instructions: b.insns,
		License:      "GPL",
	}, ebpf.ProgramOptions{KernelTypes: spec})
	if err != nil {
		return nil, fmt.Errorf("task iterator: load: %w", BPFErr(err))
	}
	l, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("task iterator: attach: %w", BPFErr(err))
	}
	it := &taskIter{prog: prog, link: l, buf: make([]byte, 64<<10), io: !b.missing["io"], pidLinks: map[int32]int{}}
	// Without the program that reads tasks by TID (it needs Linux 6.10's
	// bpf_task_from_pid for syscall programs), partial reads go through
	// per-process links: tidOff says why.
	if it.tids, err = newTIDReader(spec, kt); err != nil {
		it.tidOff = err.Error()
	}
	return it, nil
}

// A TID reader reads the tasks of a list of TIDs, in one bpf(2) call: a
// syscall program run by BPF_PROG_TEST_RUN looks each up
// (bpf_task_from_pid) and copies it into a record, as the iterator's
// program does, in a map that both sides share through mmap(2). Where the
// task iterator costs the kernel an iterator, a file and a read per
// process (about 9 us each), this costs about 0.5 us a task.
type tidReader struct {
	prog *ebpf.Program
	m    *ebpf.Map
	mem  []byte
}

// The TID reader's map holds one value: the number of TIDs asked (u32)
// and the bytes of records written (u32), tidMax TIDs (u32 each), then
// the records, as the iterator writes them.
const (
	tidMax    = 256
	tidRecs   = 8 + 4*tidMax
	tidValue  = tidRecs + tidMax*(iterRecSize+iterExtSize)
	tidRecMax = iterRecSize + iterExtSize
)

// newTIDReader loads the TID reader's map and program.
func newTIDReader(spec *btf.Spec, kt kernelTypes) (*tidReader, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: tidValue, MaxEntries: 1, Flags: unix.BPF_F_MMAPABLE})
	if err != nil {
		return nil, fmt.Errorf("task reader: map: %w", BPFErr(err))
	}
	size := (tidValue + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("task reader: mmap: %w", err)
	}
	fail := func(err error) (*tidReader, error) {
		unix.Munmap(mem)
		m.Close()
		return nil, err
	}
	calls := map[string]asm.Instruction{}
	for _, name := range []string{"bpf_task_from_pid", "bpf_task_release", "bpf_rcu_read_lock", "bpf_rcu_read_unlock",
		"bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy"} {
		var fn *btf.Func
		if err := spec.TypeByName(name, &fn); err != nil {
			return fail(fmt.Errorf("task reader: kernel BTF: %s: %w", name, err))
		}
		id, err := spec.TypeID(fn)
		if err != nil {
			return fail(fmt.Errorf("task reader: kernel BTF: %s: %w", name, err))
		}
		calls[name] = asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoKfuncCall, Constant: int64(id)}
	}
	// R6: the map's value; R7: the task; R5: where its record goes. The
	// loop is an open-coded iterator (bpf_iter_num, its state at fp-8),
	// which the verifier checks once, not once a turn.
	b := &progBuilder{missing: map[string]bool{}, dst: asm.R5}
	b.insns = asm.Instructions{
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, -16, asm.R2, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.StoreImm(asm.R6, 4, 0, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, 0, asm.Word),
		asm.JLE.Imm(asm.R3, tidMax, "count"),
		asm.Mov.Imm(asm.R3, tidMax),
		asm.Mov.Reg(asm.R1, asm.RFP).WithSymbol("count"),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 0),
		calls["bpf_iter_num_new"],
		calls["bpf_rcu_read_lock"],
		asm.Mov.Reg(asm.R1, asm.RFP).WithSymbol("loop"),
		asm.Add.Imm(asm.R1, -8),
		calls["bpf_iter_num_next"],
		asm.JEq.Imm(asm.R0, 0, "done"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.JGE.Imm(asm.R1, tidMax, "loop"),
		asm.LSh.Imm(asm.R1, 2),
		asm.Add.Reg(asm.R1, asm.R6),
		asm.LoadMem(asm.R1, asm.R1, 8, asm.Word),
		calls["bpf_task_from_pid"],
		asm.JEq.Imm(asm.R0, 0, "loop"), // exited: no record
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word),
		asm.JGT.Imm(asm.R2, tidValue-tidRecs-tidRecMax, "full"),
		asm.Mov.Reg(asm.R5, asm.R6),
		asm.Add.Reg(asm.R5, asm.R2),
		asm.Add.Imm(asm.R5, tidRecs),
	}
	if err := b.taskBody(spec, kt, 0); err != nil {
		return fail(err)
	}
	b.insns = append(b.insns,
		asm.LoadMem(asm.R2, asm.R6, 4, asm.Word).WithSymbol("write"),
		asm.Add.Reg(asm.R2, asm.R3),
		asm.StoreMem(asm.R6, 4, asm.R2, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R7),
		calls["bpf_task_release"],
		asm.Ja.Label("loop"),
		asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("full"),
		calls["bpf_task_release"],
		calls["bpf_rcu_read_unlock"].WithSymbol("done"),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -8),
		calls["bpf_iter_num_destroy"],
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "gosleuth_tids",
		Type:         ebpf.Syscall,
		Flags:        unix.BPF_F_SLEEPABLE,
		Instructions: b.insns,
		License:      "GPL",
	}, ebpf.ProgramOptions{KernelTypes: spec})
	if err != nil {
		return fail(fmt.Errorf("task reader: load: %w", BPFErr(err)))
	}
	return &tidReader{prog: prog, m: m, mem: mem}, nil
}

// progTestRun is BPF_PROG_TEST_RUN's attribute, as far as a syscall
// program uses it.
type progTestRun struct {
	progFD, retval                          uint32
	dataSizeIn, dataSizeOut                 uint32
	dataIn, dataOut                         uint64
	repeat, duration, ctxSizeIn, ctxSizeOut uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize, _                uint32
}

const bpfProgTestRun = 10 // BPF_PROG_TEST_RUN

// readTIDs reads the tasks of tids (at most tidMax) and appends their
// records, as readLink does; an exited task has none.
func (it *taskIter) readTIDs(tids []int32, reads *int) error {
	t := it.tids
	le := binary.NativeEndian
	le.PutUint32(t.mem[0:], uint32(len(tids)))
	le.PutUint32(t.mem[4:], 0)
	for i, tid := range tids {
		le.PutUint32(t.mem[8+4*i:], uint32(tid))
	}
	attr := progTestRun{progFD: uint32(t.prog.FD())}
	*reads++
	if _, _, e := unix.RawSyscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); e != 0 {
		return fmt.Errorf("task reader: run: %w", e)
	}
	n := int(le.Uint32(t.mem[4:]))
	if n > tidValue-tidRecs {
		return fmt.Errorf("task reader: %d bytes of records", n)
	}
	if used := it.parse(t.mem[tidRecs : tidRecs+n]); used != n {
		return fmt.Errorf("task reader: %d bytes left over", n-used)
	}
	return nil
}

func (t *tidReader) close() {
	unix.Munmap(t.mem)
	t.prog.Close()
	t.m.Close()
}

// kernelTypes are the kernel structures a task's record is copied from.
type kernelTypes struct {
	task, sig, mm, pc, cred *btf.Struct
}

// taskBody appends the code that copies the task at R7 into a record at
// frame (from b.dst), and a leader's extension after it, and leaves the
// length written in R3, at the label "write" that the caller appends. It
// uses R2 to R4, R8 and R9.
func (b *progBuilder) taskBody(spec *btf.Spec, kt kernelTypes, frame int16) error {
	task, sig, mm, pc, cred := kt.task, kt.sig, kt.mm, kt.pc, kt.cred
	p := func(path ...string) [][]string { return [][]string{path} }
	T := asm.R7
	for _, f := range []recField{
		{T, task, p("pid"), 0, 4, ""},
		{T, task, p("tgid"), 4, 4, ""},
		{T, task, p("se", "sum_exec_runtime"), 8, 8, ""},
		{T, task, p("sched_info", "run_delay"), 16, 8, ""},
		{T, task, p("sched_info", "pcount"), 24, 8, ""},
		{T, task, p("nvcsw"), 32, 8, ""},
		{T, task, p("nivcsw"), 40, 8, ""},
		{T, task, p("start_boottime"), 48, 8, ""},
		{T, task, p("utime"), 56, 8, ""},
		{T, task, p("stime"), 64, 8, ""},
		// Kept by every kernel but those with native virtual CPU
		// accounting (powerpc, s390), whose times need no split.
		{T, task, p("prev_cputime", "utime"), 72, 8, "prev"},
		{T, task, p("prev_cputime", "stime"), 80, 8, "prev"},
		{T, task, p("min_flt"), 88, 8, ""},
		{T, task, p("maj_flt"), 96, 8, ""},
		{T, task, p("ioac", "syscr"), 104, 8, "io"},
		{T, task, p("ioac", "syscw"), 112, 8, "io"},
		{T, task, p("__state"), 120, 4, ""},
		{T, task, p("exit_state"), 124, 4, ""},
		// The CPU is in thread_info since Linux 5.16, in the task before.
		{T, task, [][]string{{"thread_info", "cpu"}, {"cpu"}}, 128, 4, ""},
		{T, task, p("flags"), 132, 4, ""},
		{T, task, p("comm"), 136, 16, ""},
	} {
		if err := b.copy(f, frame); err != nil {
			return err
		}
	}
	// A leader (pid == tgid) gets its extension; any other thread its
	// record alone. R3: the length to write.
	tgidOff, _, _ := memberOffset(task, "tgid")
	pidOff, _, _ := memberOffset(task, "pid")
	b.insns = append(b.insns,
		asm.LoadMem(asm.R2, asm.R7, tgidOff, asm.Word),
		asm.LoadMem(asm.R4, asm.R7, pidOff, asm.Word),
		asm.Mov.Imm(asm.R3, iterRecSize),
		asm.JNE.Reg(asm.R2, asm.R4, "write"),
	)
	for _, ptr := range []struct {
		reg  asm.Register
		name string
	}{{asm.R8, "signal"}, {asm.R9, "real_parent"}} {
		off, err := memberAt(task, 8, ptr.name)
		if err != nil {
			return err
		}
		b.insns = append(b.insns, asm.LoadMem(ptr.reg, asm.R7, off, asm.DWord))
	}
	x := func(o int16) int16 { return iterRecSize + o }
	S := asm.R8
	for _, f := range []recField{
		{asm.R9, task, p("tgid"), x(0), 4, ""},
		{S, sig, p("nr_threads"), x(4), 4, ""},
		{S, sig, p("utime"), x(40), 8, ""},
		{S, sig, p("stime"), x(48), 8, ""},
		{S, sig, p("sum_sched_runtime"), x(56), 8, ""},
		{S, sig, p("prev_cputime", "utime"), x(64), 8, "prev"},
		{S, sig, p("prev_cputime", "stime"), x(72), 8, "prev"},
		{S, sig, p("cutime"), x(80), 8, ""},
		{S, sig, p("cstime"), x(88), 8, ""},
		{S, sig, p("min_flt"), x(96), 8, ""},
		{S, sig, p("maj_flt"), x(104), 8, ""},
		{S, sig, p("ioac", "syscr"), x(112), 8, "io"},
		{S, sig, p("ioac", "syscw"), x(120), 8, "io"},
	} {
		if err := b.copy(f, frame); err != nil {
			return err
		}
	}
	// The soft fd limit: an element of an array, which memberOffset's
	// paths do not index.
	rlim, _, err := memberOffset(sig, "rlim")
	if err != nil {
		return err
	}
	var rl *btf.Struct
	if err := spec.TypeByName("rlimit", &rl); err != nil {
		return fmt.Errorf("task iterator: kernel BTF: rlimit: %w", err)
	}
	rlSize, err := btf.Sizeof(rl)
	if err != nil {
		return fmt.Errorf("task iterator: rlimit: %w", err)
	}
	cur, err := memberAt(rl, 8, "rlim_cur")
	if err != nil {
		return err
	}
	b.insns = append(b.insns,
		asm.LoadMem(asm.R2, S, rlim+int16(rlimitNoFile*rlSize)+cur, asm.DWord),
		asm.StoreMem(b.dst, frame+x(128), asm.R2, asm.DWord))
	credOff, err := memberAt(task, 8, "cred")
	if err != nil {
		return err
	}
	euid, err := memberAt(cred, 4, "euid")
	if err != nil {
		return err
	}
	b.insns = append(b.insns,
		asm.LoadMem(asm.R2, asm.R7, credOff, asm.DWord),
		asm.LoadMem(asm.R2, asm.R2, euid, asm.Word),
		asm.StoreMem(b.dst, frame+x(32), asm.R2, asm.Word),
		asm.StoreImm(b.dst, frame+x(36), 0, asm.Word),
	)
	rss, err := rssInsns(b.dst, task, mm, pc, frame+x(8))
	if err != nil {
		return err
	}
	b.insns = append(b.insns, rss...)
	b.insns = append(b.insns, asm.Mov.Imm(asm.R3, iterRecSize+iterExtSize))
	return nil
}

// rssInsns returns the code that stores a leader's resident pages at at:
// the file, anon and shmem counters of its mm's rss_stat (zero for a task
// without an mm: a zombie), from dst. It uses R2 and R4 only.
func rssInsns(dst asm.Register, task, mm, pc *btf.Struct, at int16) (asm.Instructions, error) {
	mmOff, err := memberAt(task, 8, "mm")
	if err != nil {
		return nil, err
	}
	rss, _, err := memberOffset(mm, "rss_stat")
	if err != nil {
		return nil, err
	}
	count, err := memberAt(pc, 8, "count")
	if err != nil {
		return nil, err
	}
	pcSize, err := btf.Sizeof(pc)
	if err != nil {
		return nil, fmt.Errorf("task iterator: percpu_counter: %w", err)
	}
	// MM_FILEPAGES, MM_ANONPAGES and MM_SHMEMPAGES are 0, 1 and 3 in
	// every kernel whose rss_stat is an array of percpu_counter (6.2 and
	// later); /proc's RSS is their sum, each read as its counter's count
	// (clamped at 0 in Go), as get_mm_counter does.
	rssAt := func(i int) int16 { return rss + int16(i*pcSize) + count }
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(dst, at, asm.R2, asm.DWord),
		asm.StoreMem(dst, at+8, asm.R2, asm.DWord),
		asm.StoreMem(dst, at+16, asm.R2, asm.DWord),
		asm.LoadMem(asm.R4, asm.R7, mmOff, asm.DWord),
		asm.JEq.Imm(asm.R4, 0, "rss_done"),
	}
	for i, k := range []int{0, 1, 3} {
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R4, rssAt(k), asm.DWord),
			asm.StoreMem(dst, at+int16(8*i), asm.R2, asm.DWord))
	}
	return append(insns, asm.Mov.Imm(asm.R2, 0).WithSymbol("rss_done")), nil
}

// BPFErr says what a missing privilege means, in place of cilium/ebpf's
// longer message (which suggests the memlock limit, not the cause here).
func BPFErr(err error) error {
	for _, e := range []unix.Errno{unix.EPERM, unix.EACCES} {
		if errors.Is(err, e) {
			return fmt.Errorf("bpf(2): %w (needs root, or CAP_BPF and CAP_PERFMON)", e)
		}
	}
	return err
}

// memberAt is memberOffset for a member that must be width bytes wide,
// the width the program loads.
func memberAt(s *btf.Struct, width int, path ...string) (int16, error) {
	off, n, err := memberOffset(s, path...)
	if err == nil && n != width {
		err = fmt.Errorf("task iterator: %s.%v is %d bytes wide, want %d", s.Name, path, n, width)
	}
	return off, err
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
		fd, ok := it.pidLinks[pid]
		if !ok {
			info := iterTaskInfo{pid: uint32(pid)}
			attr := linkCreateIter{progFD: uint32(it.prog.FD()), attachType: uint32(ebpf.AttachTraceIter),
				iterInfo: uint64(uintptr(unsafe.Pointer(&info))), iterInfoLen: uint32(unsafe.Sizeof(info))}
			*reads++
			lfd, _, e := unix.RawSyscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
			if e != 0 {
				return fmt.Errorf("task iterator: link for process %d: %w", pid, e)
			}
			fd = int(lfd)
			it.pidLinks[pid] = fd
		}
		if err := it.readLink(fd, reads); err != nil {
			return err
		}
	}
	it.finish()
	return nil
}

// dropLinks closes the per-process links of the PIDs keep rejects.
func (it *taskIter) dropLinks(keep func(pid int32) bool) {
	for pid, fd := range it.pidLinks {
		if !keep(pid) {
			rawClose(fd)
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

// nsTicks converts the kernel's nanoseconds to the ClockTicks /proc shows,
// truncating as its nsec_to_clock_t does.
func nsTicks(ns uint64) uint64 { return ns / (1e9 / ClockTicks) }

// cputime is a task's run time split between user and system mode, in
// nanoseconds.
type cputime struct{ u, s uint64 }

// adjust splits rtime, a task's exact run time, between user and system
// mode in the ratio of its tick-sampled utime and stime, never moving
// either back from the last split, prev, which it then updates; it returns
// the new split. This is the kernel's cputime_adjust (kernel/sched/
// cputime.c), the split /proc's stat shows: computed here because the
// iterator reads the three counters, not stat's result, and kept per task
// in gosleuth as the kernel keeps it per task (or per thread group) for
// its readers.
func (prev *cputime) adjust(rtime, utime, stime uint64) cputime {
	if prev.u+prev.s >= rtime {
		return *prev // no new run time (or a reading out of order)
	}
	switch {
	case stime == 0:
		// No system tick yet: all user time, until ticks say otherwise.
	case utime == 0:
		stime = rtime
	default:
		// stime * rtime / (stime + utime), in 128 bits: stime <=
		// stime+utime, so the quotient fits in 64.
		hi, lo := bits.Mul64(stime, rtime)
		sum := stime + utime
		if sum < stime || hi >= sum {
			stime = rtime // sum overflowed: not in a real counter
		} else {
			stime, _ = bits.Div64(hi, lo, sum)
		}
		stime = min(stime, rtime)
	}
	stime = max(stime, prev.s)
	utime = rtime - stime
	if utime < prev.u {
		utime = prev.u
		stime = rtime - utime
	}
	*prev = cputime{utime, stime}
	return *prev
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
