package proc

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

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
