package syscalls

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gosleuth/gosleuth/internal/perf"
)

// maxNr bounds the syscall numbers the BPF counter keeps (Linux has fewer
// than 500 on amd64 and arm64).
const maxNr = 1024

// BPFCounter counts the syscalls of one process (every thread, present and
// future; not its children) with one BPF program on the
// raw_syscalls:sys_enter tracepoint that adds to an array indexed by
// syscall number when the caller's thread group is the target's. It needs
// no descriptor per thread, so it serves targets with thousands of threads
// where one perf counter per syscall and thread would not fit; its cost is
// a few tens of nanoseconds on every syscall of the host while attached.
// Close (or the end of gosleuth, even by SIGKILL) detaches it.
type BPFCounter struct {
	objs   tracepointProgram
	counts *ebpf.Map
}

// NewBPFCounter attaches a counter for the thread group pid. It needs root
// (or CAP_BPF and CAP_PERFMON) and tracefs.
func NewBPFCounter(pid int) (*BPFCounter, error) {
	if _, err := perf.TracefsRoot(); err != nil {
		return nil, fmt.Errorf("count syscalls with BPF: %w", err)
	}
	c := &BPFCounter{}
	m, err := c.objs.newMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: maxNr})
	if err != nil {
		return nil, fmt.Errorf("count syscalls with BPF: %w", err)
	}
	c.counts = m
	// The tracepoint's record: 8 bytes of common fields, then long id.
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, int32(pid), "out"),
		asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord),
		asm.JGE.Imm(asm.R1, maxNr, "out"),
		asm.StoreMem(asm.RFP, -4, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		// 1: a tracepoint program's 0 drops the event for every perf
		// event on raw_syscalls:sys_enter, another tracer's included.
		asm.Mov.Imm(asm.R0, 1).WithSymbol("out"),
		asm.Return(),
	}
	if err := c.objs.attach("raw_syscalls", "sys_enter", insns); err != nil {
		c.Close()
		return nil, fmt.Errorf("count syscalls with BPF: %w", err)
	}
	return c, nil
}

// Read returns the calls counted so far by syscall number.
func (c *BPFCounter) Read() (map[int]uint64, error) {
	out := map[int]uint64{}
	var v uint64
	for nr := uint32(0); nr < maxNr; nr++ {
		if err := c.counts.Lookup(nr, &v); err != nil {
			return nil, fmt.Errorf("read BPF syscall counts: %w", err)
		}
		if v > 0 {
			out[int(nr)] = v
		}
	}
	return out, nil
}

// Close detaches the program and frees the map.
func (c *BPFCounter) Close() error { return c.objs.Close() }
