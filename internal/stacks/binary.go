package stacks

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Binary is an executable's Go function table, for the probe engine: the
// same pclntab reader the profiler symbolizes with (it works on stripped,
// PIE and cgo binaries), opened through the same cache.
type Binary struct{ o *object }

// Func is one function of a Go binary's function table.
type Func struct {
	Name string
	// Entry and End bound its code, as link-time virtual addresses.
	Entry, End uint64
}

// ErrNotGo reports a binary without a Go function table.
var ErrNotGo = errors.New("no Go function table (not a Go program, or a Go older than 1.18)")

// OpenBinary reads the ELF file at path (use /proc/PID/exe for a process's
// executable).
func OpenBinary(path string) (*Binary, error) {
	o, err := loadObject(path)
	if err != nil {
		return nil, err
	}
	if !o.isGo() {
		return nil, fmt.Errorf("open %s: %w", path, ErrNotGo)
	}
	return &Binary{o}, nil
}

// Funcs lists the functions of the table, in address order. Names repeat
// where an ABI0 wrapper shares its function's name.
func (b *Binary) Funcs() []Func {
	t := b.o.gt
	le := binary.LittleEndian
	out := make([]Func, 0, t.nfunc)
	for i := 0; i < t.nfunc; i++ {
		if (i+1)*8+4 > len(t.funcs) {
			break
		}
		fo := int(le.Uint32(t.funcs[i*8+4:]))
		if fo <= 0 || fo >= len(t.funcs) {
			continue
		}
		f := funcInfo{t, fo}
		end := t.text + uint64(le.Uint32(t.funcs[(i+1)*8:]))
		out = append(out, Func{Name: cstring(t.funcnames, f.nameOff()), Entry: f.entry(), End: end})
	}
	return out
}

// FileOffset converts a link-time virtual address to its offset in the
// file (what a uprobe is placed at).
func (b *Binary) FileOffset(vaddr uint64) (uint64, bool) {
	for _, p := range b.o.loads {
		if off, ok := span(vaddr, 1, p.Vaddr, p.Filesz); ok {
			return p.Off + off, true
		}
	}
	return 0, false
}

// Read returns n bytes of the file's image at link-time address vaddr.
func (b *Binary) Read(vaddr uint64, n int) ([]byte, bool) { return b.o.read(vaddr, n) }

// Frames returns the frames at link-time address vaddr, innermost first
// (inlined calls expanded), nil when nothing covers it.
func (b *Binary) Frames(vaddr uint64) []Frame {
	out, _ := b.o.symbolize(vaddr, nil)
	return out
}

// SPDelta returns how far the stack pointer is below the frame's entry
// value at link-time address vaddr (the frame size there), from the
// function table's pcsp table: what an unwinder adds to SP to find the
// return address.
func (b *Binary) SPDelta(vaddr uint64) (int32, bool) { return b.o.spDelta(vaddr) }

// Vaddr converts a file offset (from /proc/PID/maps) to a link-time
// address.
func (b *Binary) Vaddr(fileOff uint64) (uint64, bool) { return b.o.vaddr(fileOff) }
