package syscalls

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gosleuth/gosleuth/internal/perf"
)

// PathMax is how much of a path OpenPaths keeps: longer ones are cut (and
// end in "..."). Paths re-opened in a loop are short (/proc/PID/stat,
// a configuration file); the key of the kernel's map is this long.
const PathMax = 64

// openPathsMax bounds the distinct paths kept; opens of paths beyond it
// count in Other.
const openPathsMax = 1024

// OpenPaths counts the files one process opens, by path, exactly: a BPF
// program on the syscalls:sys_enter_openat tracepoint copies the path
// argument of the target's calls (the first PathMax-1 bytes) and adds one
// to its count in a hash map. It names the re-opened file whatever the
// language and however the path is built, at a cost of about a
// microsecond on each of the target's openat calls (other processes' pay
// the tracepoint's test of their thread group only). Close (or the end of
// gosleuth, even by SIGKILL) detaches it.
type OpenPaths struct {
	objs  tracepointProgram
	paths *ebpf.Map
	total *ebpf.Map
}

// PathCount is one path and the times it was opened.
type PathCount struct {
	Path  string
	Count uint64
}

// NewOpenPaths attaches a path counter for the thread group pid. It needs
// root (or CAP_BPF and CAP_PERFMON) and tracefs.
func NewOpenPaths(pid int) (*OpenPaths, error) {
	if _, err := perf.TracefsRoot(); err != nil {
		return nil, fmt.Errorf("count opened paths: %w", err)
	}
	o := &OpenPaths{}
	var err error
	if o.paths, err = o.objs.newMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: PathMax, ValueSize: 8, MaxEntries: openPathsMax}); err == nil {
		o.total, err = o.objs.newMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	}
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("count opened paths: %w", err)
	}
	// The tracepoint's record (events/syscalls/sys_enter_openat/format):
	// common fields, __syscall_nr, dfd at 16, filename at 24. The key is
	// zeroed first: the copy stops at the path's NUL, and the bytes after
	// it must not be whatever the stack held.
	const key = -PathMax
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.JNE.Imm(asm.R0, int32(pid), "out"),
		// total[0]++
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, key-8, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key-8),
		asm.LoadMapPtr(asm.R1, o.total.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "copy"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		// key = the path, zero-padded
		asm.Mov.Imm(asm.R1, 0).WithSymbol("copy"),
	}
	for off := int16(key); off < 0; off += 8 {
		insns = append(insns, asm.StoreMem(asm.RFP, off, asm.R1, asm.DWord))
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, key),
		asm.Mov.Imm(asm.R2, PathMax),
		asm.LoadMem(asm.R3, asm.R6, 24, asm.DWord),
		asm.FnProbeReadUserStr.Call(),
		asm.JSLT.Imm(asm.R0, 1, "out"), // unreadable: counted in total only
		// paths[key]++, or insert 1
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.LoadMapPtr(asm.R1, o.paths.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "insert"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.Ja.Label("out"),
		asm.Mov.Imm(asm.R1, 1).WithSymbol("insert"),
		asm.StoreMem(asm.RFP, key-8, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, key-8),
		asm.LoadMapPtr(asm.R1, o.paths.FD()),
		// BPF_NOEXIST: a thread on another CPU inserting the same path
		// first loses this one call, not the other's count.
		asm.Mov.Imm(asm.R4, 1),
		asm.FnMapUpdateElem.Call(),
		// 1: the kernel drops the tracepoint's event for every perf event
		// on it when a BPF program returns 0, so 0 would blind the
		// doctor's own openat counter and any other tracer's.
		asm.Mov.Imm(asm.R0, 1).WithSymbol("out"),
		asm.Return(),
	)
	if err := o.objs.attach("syscalls", "sys_enter_openat", insns); err != nil {
		o.Close()
		return nil, fmt.Errorf("count opened paths: %w", err)
	}
	return o, nil
}

// Read returns the paths opened so far, most opened first, and every
// openat call counted, those of paths not kept included (the map full,
// the path unreadable).
func (o *OpenPaths) Read() (paths []PathCount, total uint64, err error) {
	if err := o.total.Lookup(uint32(0), &total); err != nil {
		return nil, 0, fmt.Errorf("read opened paths: %w", err)
	}
	var k [PathMax]byte
	var v uint64
	it := o.paths.Iterate()
	for it.Next(&k, &v) {
		p := k[:]
		if i := bytes.IndexByte(p, 0); i >= 0 {
			p = p[:i]
		}
		s := string(p)
		if len(p) == PathMax-1 {
			s += "..." // cut by the copy
		}
		paths = append(paths, PathCount{Path: s, Count: v})
	}
	if err := it.Err(); err != nil {
		return nil, 0, fmt.Errorf("read opened paths: %w", err)
	}
	sort.Slice(paths, func(i, j int) bool {
		if paths[i].Count != paths[j].Count {
			return paths[i].Count > paths[j].Count
		}
		return paths[i].Path < paths[j].Path
	})
	return paths, total, nil
}

// Close detaches the program and frees the maps.
func (o *OpenPaths) Close() error { return o.objs.Close() }
