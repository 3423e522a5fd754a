package proc

import (
	"errors"
	"fmt"
	"runtime/debug"

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
	pidLinks map[int32]pidLink
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
	it := &taskIter{prog: prog, link: l, buf: make([]byte, 64<<10), io: !b.missing["io"], pidLinks: map[int32]pidLink{}}
	// Without the program that reads tasks by TID (it needs Linux 6.10's
	// bpf_task_from_pid for syscall programs), partial reads go through
	// per-process links: tidOff says why.
	if it.tids, err = newTIDReader(spec, kt); err != nil {
		it.tidOff = err.Error()
	}
	return it, nil
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
