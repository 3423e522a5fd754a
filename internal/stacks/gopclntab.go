package stacks

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// Frame is one symbolized frame. Inlined frames come before the function
// they were inlined into.
type Frame struct {
	Func string
	File string
	Line int
	// Inlined is true when the frame has no physical stack frame of its own.
	Inlined bool
}

// pclntab magics, by the Go release that introduced the layout.
const (
	magicGo118 = 0xfffffff0 // Go 1.18, 1.19
	magicGo120 = 0xfffffff1 // Go 1.20 and later
)

const (
	pcdataInlTreeIndex = 2
	funcdataInlTree    = 3
)

var errNoPclntab = errors.New("no usable Go pclntab")

// memReader reads bytes at a link-time virtual address of the binary.
type memReader func(vaddr uint64, n int) ([]byte, bool)

// goTable is a Go binary's function table read straight from its pclntab
// (layouts of Go 1.18 and later), without debug/gosym, because it also needs
// the stack-pointer deltas (pcsp) and the inline trees.
type goTable struct {
	go120   bool
	ptrSize int
	quantum uint64
	nfunc   int
	text    uint64 // link-time address functab offsets are relative to

	funcnames []byte
	cutab     []byte
	filetab   []byte
	pctab     []byte
	funcs     []byte // pclntable: functab, then the _func records

	gofunc uint64 // base of funcdata offsets; 0 when unknown (no inlining)
	mem    memReader
}

// newGoTable parses a pclntab. text is the address functab entries are
// relative to (moduledata.text); gofunc the base of funcdata (moduledata.gofunc,
// 0 if unknown); mem reads other parts of the binary (the inline trees).
func newGoTable(tab []byte, text, gofunc uint64, mem memReader) (*goTable, error) {
	if len(tab) < 8 {
		return nil, errNoPclntab
	}
	le := binary.LittleEndian
	t := &goTable{quantum: uint64(tab[6]), ptrSize: int(tab[7]), text: text, gofunc: gofunc, mem: mem}
	switch le.Uint32(tab) {
	case magicGo118:
	case magicGo120:
		t.go120 = true
	default:
		return nil, fmt.Errorf("pclntab magic %#x: %w (Go 1.18 or later is needed)", le.Uint32(tab), errNoPclntab)
	}
	if t.ptrSize != 8 || tab[4] != 0 || tab[5] != 0 || t.quantum == 0 {
		return nil, fmt.Errorf("pclntab header (pointer size %d): %w", t.ptrSize, errNoPclntab)
	}
	word := func(i int) uint64 {
		off := 8 + i*8
		if off+8 > len(tab) {
			return 0
		}
		return le.Uint64(tab[off:])
	}
	// word(2) was textStart up to Go 1.25; Go 1.26 stores 0 there.
	if t.text == 0 {
		t.text = word(2)
	}
	sub := func(i int) []byte {
		off := word(i)
		if off == 0 || off > uint64(len(tab)) {
			return nil
		}
		return tab[off:]
	}
	t.funcnames, t.cutab, t.filetab, t.pctab, t.funcs = sub(3), sub(4), sub(5), sub(6), sub(7)
	if t.funcnames == nil || t.funcs == nil || t.pctab == nil {
		return nil, fmt.Errorf("pclntab offsets: %w", errNoPclntab)
	}
	// The function table holds nfunc+1 entries of 8 bytes. The count comes
	// from the binary (anyone's), so it is checked by division: a
	// multiplication overflows for a count near 2^61 and lets find index
	// outside the table.
	if n := word(0); n == 0 || n > uint64(len(t.funcs)/8-1) {
		return nil, fmt.Errorf("pclntab claims %d functions in a %d-byte table: %w", n, len(t.funcs), errNoPclntab)
	}
	t.nfunc = int(word(0))
	if t.text == 0 {
		return nil, fmt.Errorf("pclntab: text start unknown: %w", errNoPclntab)
	}
	return t, nil
}

// funcInfo is the offset of one _func record in t.funcs.
type funcInfo struct {
	t   *goTable
	off int
}

func (f funcInfo) u32(at int) uint32 {
	o := f.off + at
	if o < 0 || o+4 > len(f.t.funcs) {
		return 0
	}
	return binary.LittleEndian.Uint32(f.t.funcs[o:])
}

func (f funcInfo) entry() uint64   { return f.t.text + uint64(f.u32(0)) }
func (f funcInfo) nameOff() uint32 { return f.u32(4) }
func (f funcInfo) pcsp() uint32    { return f.u32(16) }
func (f funcInfo) pcfile() uint32  { return f.u32(20) }
func (f funcInfo) pcln() uint32    { return f.u32(24) }
func (f funcInfo) npcdata() int    { return int(f.u32(28)) }
func (f funcInfo) cuOffset() uint32 {
	return f.u32(32)
}

// fixedSize is the size of the _func fields before the pcdata array.
func (f funcInfo) fixedSize() int {
	if f.t.go120 {
		return 44 // startLine int32 was added in Go 1.20
	}
	return 40
}

func (f funcInfo) nfuncdata() int {
	o := f.off + f.fixedSize() - 1
	if o >= len(f.t.funcs) {
		return 0
	}
	return int(f.t.funcs[o])
}

func (f funcInfo) pcdata(i int) uint32 {
	if i >= f.npcdata() {
		return 0
	}
	return f.u32(f.fixedSize() + 4*i)
}

func (f funcInfo) funcdata(i int) (uint32, bool) {
	if i >= f.nfuncdata() {
		return 0, false
	}
	v := f.u32(f.fixedSize() + 4*f.npcdata() + 4*i)
	return v, v != ^uint32(0)
}

// find returns the function containing pc.
func (t *goTable) find(pc uint64) (funcInfo, bool) {
	if pc < t.text {
		return funcInfo{}, false
	}
	off := pc - t.text
	le := binary.LittleEndian
	entry := func(i int) uint64 { return uint64(le.Uint32(t.funcs[i*8:])) }
	if off >= entry(t.nfunc) {
		return funcInfo{}, false
	}
	lo, hi := 0, t.nfunc
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if entry(m) <= off {
			lo = m
		} else {
			hi = m
		}
	}
	if entry(lo) > off {
		return funcInfo{}, false
	}
	fo := int(le.Uint32(t.funcs[lo*8+4:]))
	if fo <= 0 || fo >= len(t.funcs) {
		return funcInfo{}, false
	}
	return funcInfo{t, fo}, true
}

// cstring returns the NUL-terminated string at off in b.
func cstring(b []byte, off uint32) string {
	if int(off) >= len(b) {
		return ""
	}
	s := b[off:]
	if i := bytes.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return string(s)
}

// pcvalue decodes the pc-value table at off in pctab for targetpc in a
// function starting at entry. ok is false when targetpc is not covered.
func (t *goTable) pcvalue(off uint32, entry, targetpc uint64) (int32, bool) {
	if off == 0 || int(off) >= len(t.pctab) {
		return 0, false
	}
	p := t.pctab[off:]
	pc := entry
	val := int32(-1)
	first := true
	for {
		uv, n := binary.Uvarint(p)
		if n <= 0 || (uv == 0 && !first) {
			return 0, false
		}
		p = p[n:]
		val += int32(-(uint32(uv) & 1) ^ (uint32(uv) >> 1))
		pd, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		pc += pd * t.quantum
		first = false
		if targetpc < pc {
			return val, true
		}
	}
}

// spDelta returns how far SP is below the function's entry SP at pc: the
// return address is at SP+delta.
func (t *goTable) spDelta(pc uint64) (int32, bool) {
	f, ok := t.find(pc)
	if !ok {
		return 0, false
	}
	return t.pcvalue(f.pcsp(), f.entry(), pc)
}

func (t *goTable) fileLine(f funcInfo, pc uint64) (string, int) {
	line, _ := t.pcvalue(f.pcln(), f.entry(), pc)
	fileno, ok := t.pcvalue(f.pcfile(), f.entry(), pc)
	file := ""
	if ok && fileno >= 0 {
		i := int(f.cuOffset()) + int(fileno)
		if i*4+4 <= len(t.cutab) {
			if fo := binary.LittleEndian.Uint32(t.cutab[i*4:]); fo != ^uint32(0) {
				file = cstring(t.filetab, fo)
			}
		}
	}
	return file, int(line)
}

// inlineEntry is one node of an inline tree: the inlined function's name
// and the offset from the outer function's entry of its call site.
type inlineEntry struct {
	nameOff  uint32
	parentPc int32
}

func (t *goTable) inlineAt(f funcInfo, ix int32) (inlineEntry, bool) {
	if t.gofunc == 0 || t.mem == nil {
		return inlineEntry{}, false
	}
	base, ok := f.funcdata(funcdataInlTree)
	if !ok {
		return inlineEntry{}, false
	}
	le := binary.LittleEndian
	if t.go120 {
		// {funcID uint8, _ [3]byte, nameOff int32, parentPc int32, startLine int32}
		b, ok := t.mem(t.gofunc+uint64(base)+uint64(ix)*16, 16)
		if !ok {
			return inlineEntry{}, false
		}
		return inlineEntry{le.Uint32(b[4:]), int32(le.Uint32(b[8:]))}, true
	}
	// Go 1.18/1.19: {parent int16, funcID uint8, _ byte, file int32,
	// line int32, func_ int32, parentPc int32}
	b, ok := t.mem(t.gofunc+uint64(base)+uint64(ix)*20, 20)
	if !ok {
		return inlineEntry{}, false
	}
	return inlineEntry{le.Uint32(b[12:]), int32(le.Uint32(b[16:]))}, true
}

// frames appends the frames at pc, innermost (inlined) first. ok is false
// when pc is in no Go function.
func (t *goTable) frames(pc uint64, dst []Frame) ([]Frame, bool) {
	f, ok := t.find(pc)
	if !ok {
		return dst, false
	}
	entry := f.entry()
	for depth := 0; depth < 64; depth++ {
		ix, ok := t.pcvalue(f.pcdata(pcdataInlTreeIndex), entry, pc)
		if !ok || ix < 0 {
			break
		}
		e, ok := t.inlineAt(f, ix)
		if !ok {
			break
		}
		file, line := t.fileLine(f, pc)
		dst = append(dst, Frame{Func: cstring(t.funcnames, e.nameOff), File: file, Line: line, Inlined: true})
		pc = entry + uint64(e.parentPc)
	}
	file, line := t.fileLine(f, pc)
	dst = append(dst, Frame{Func: cstring(t.funcnames, f.nameOff()), File: file, Line: line})
	return dst, true
}
