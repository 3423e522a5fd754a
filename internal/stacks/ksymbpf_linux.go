package stacks

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Kernel frames are named by the kernel itself where BPF is allowed: a
// small program calls bpf_snprintf with "%ps" on each address, which is
// the kernel's own symbol lookup (sprint_symbol_no_offset: a binary search
// of its compressed symbol table, modules, BPF programs and trampolines
// included). A profile names a few hundred distinct kernel addresses; the
// alternative, /proc/kallsyms, makes the kernel print every one of its
// 100,000-odd symbols (about 40 ms of system time and 5 MB read and
// parsed) to name them. The program is a socket filter run once per batch
// by BPF_PROG_TEST_RUN: it is never attached, and closing its descriptor
// (or the process's end, SIGKILL included) frees it.

const (
	// ksymBatch is the number of addresses one run of the program names.
	ksymBatch = 64
	// ksymSlot is the room for one name: KSYM_NAME_LEN (512) and
	// " [module]" (MODULE_NAME_LEN 56) with its NUL.
	ksymSlot = 576
)

// bpfNamer names kernel addresses through bpf_snprintf's %ps.
type bpfNamer struct {
	prog    *ebpf.Program
	in, out *ebpf.Map
	format  *ebpf.Map
	// names and addrs are the output and input buffers of a batch.
	names []byte
	addrs []byte
}

// newBPFNamer loads the program. It fails without bpf(2) (not root, or
// neither CAP_BPF nor CAP_PERFMON) or on a kernel without bpf_snprintf
// (before 5.13); the caller then reads /proc/kallsyms.
func newBPFNamer() (_ *bpfNamer, err error) {
	n := &bpfNamer{names: make([]byte, ksymBatch*ksymSlot), addrs: make([]byte, ksymBatch*8)}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	// The format must be a constant string: a frozen map the program may
	// only read.
	n.format, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1,
		Flags: unix.BPF_F_RDONLY_PROG, Contents: []ebpf.MapKV{{Key: uint32(0), Value: []byte("%ps\x00")}}})
	if err == nil {
		err = n.format.Freeze()
	}
	if err != nil {
		return nil, fmt.Errorf("kernel symbols: format map: %w", err)
	}
	n.in, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: ksymBatch * 8, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("kernel symbols: address map: %w", err)
	}
	n.out, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: ksymBatch * ksymSlot, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("kernel symbols: name map: %w", err)
	}
	// R7: the addresses, R8: the names, R6: the index.
	lookup := func(m *ebpf.Map, dst asm.Register) asm.Instructions {
		return asm.Instructions{
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Reg(dst, asm.R0),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.Word),
	}
	insns = append(insns, lookup(n.in, asm.R7)...)
	insns = append(insns, lookup(n.out, asm.R8)...)
	insns = append(insns,
		asm.Mov.Imm(asm.R6, 0),
		// bpf_snprintf(names + i*slot, slot, "%ps", addrs + i*8, 8)
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("loop"),
		asm.Mul.Imm(asm.R1, ksymSlot),
		asm.Add.Reg(asm.R1, asm.R8),
		asm.Mov.Imm(asm.R2, ksymSlot),
		asm.LoadMapValue(asm.R3, n.format.FD(), 0),
		asm.Mov.Reg(asm.R4, asm.R6),
		asm.LSh.Imm(asm.R4, 3),
		asm.Add.Reg(asm.R4, asm.R7),
		asm.Mov.Imm(asm.R5, 8),
		asm.FnSnprintf.Call(),
		asm.Add.Imm(asm.R6, 1),
		asm.JLT.Imm(asm.R6, ksymBatch, "loop"),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return(),
	)
	n.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gosleuth_ksyms",
		Type:         ebpf.SocketFilter,
		Instructions: insns,
		License:      "GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("kernel symbols: load: %w", proc.BPFErr(err))
	}
	return n, nil
}

// lookup names each address of addrs: the kernel's symbol for it, or ""
// where the kernel knows none.
func (n *bpfNamer) lookup(addrs []uint64) ([]string, error) {
	out := make([]string, 0, len(addrs))
	for len(addrs) > 0 {
		batch := addrs[:min(len(addrs), ksymBatch)]
		addrs = addrs[len(batch):]
		clear(n.addrs)
		for i, a := range batch {
			binary.NativeEndian.PutUint64(n.addrs[8*i:], a)
		}
		if err := n.in.Put(uint32(0), n.addrs); err != nil {
			return nil, fmt.Errorf("kernel symbols: %w", err)
		}
		if _, err := n.prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
			return nil, fmt.Errorf("kernel symbols: %w", err)
		}
		if err := n.out.Lookup(uint32(0), &n.names); err != nil {
			return nil, fmt.Errorf("kernel symbols: %w", err)
		}
		for i := range batch {
			out = append(out, ksymName(n.names[i*ksymSlot:(i+1)*ksymSlot]))
		}
	}
	return out, nil
}

// ksymName reads one slot: "name" or "name [module]" up to a NUL; an
// address the kernel has no symbol for prints as "0x..." and gives "".
func ksymName(slot []byte) string {
	s := string(slot)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	if s == "" || strings.HasPrefix(s, "0x") {
		return ""
	}
	return s
}

// close frees the program and maps.
func (n *bpfNamer) close() {
	n.prog.Close()
	for _, m := range []*ebpf.Map{n.in, n.out, n.format} {
		m.Close()
	}
}

// bpfKernelNames names addrs with a namer loaded for the purpose.
func bpfKernelNames(addrs []uint64) ([]string, error) {
	n, err := newBPFNamer()
	if err != nil {
		return nil, err
	}
	defer n.close()
	return n.lookup(addrs)
}
