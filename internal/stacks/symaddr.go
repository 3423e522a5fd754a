package stacks

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Image is an ELF executable opened to find where one of its variables or
// functions lies, in the file and in a process that runs it (goruntime
// reads runtime.gomaxprocs this way). Unlike OpenBinary it does not enter
// the profiler's object cache: a command that looks at many processes once
// keeps nothing of their binaries, and a crafted file costs at most its own
// size in memory while it is open.
type Image struct {
	path string
	f    *os.File
	ef   *elf.File
	size int64
	id   string
	key  string
	o    *object // the Go function table, parsed on first Func
}

// maxStrtab bounds the symbol names read at once: a Go binary's .strtab is a
// few MB; a header claiming more is not believed.
const maxStrtab = 256 << 20

// OpenImage opens the ELF file at path (use /proc/PID/exe for the inode a
// process runs).
func OpenImage(path string) (*Image, error) {
	f, size, ef, id, key, err := openObject(path)
	if err != nil {
		return nil, err
	}
	return &Image{path: path, f: f, ef: ef, size: size, id: id, key: key}, nil
}

// Close releases the file.
func (im *Image) Close() error { return im.f.Close() }

// Key names the file's identity (device, inode, size, modification time,
// build ID): what is learnt of one Image holds for every process running
// the same file.
func (im *Image) Key() string { return im.key }

// PIE reports whether the file is position-independent (ET_DYN): its
// addresses then move by a load bias in each process.
func (im *Image) PIE() bool { return im.ef.Type == elf.ET_DYN }

// Machine is the file's architecture.
func (im *Image) Machine() elf.Machine { return im.ef.Machine }

// ErrNoSymtab reports a file without a symbol table (linked with -s).
var ErrNoSymtab = errors.New("no symbol table (stripped)")

// Symbol returns the link-time value of the symbol named name in the
// file's .symtab. The table is streamed, not loaded: only the names are
// held (up to maxStrtab bytes), and every entry is read from the file as it
// is, so a crafted table ends the walk at the file's end.
func (im *Image) Symbol(name string) (uint64, error) {
	ef := im.ef
	st := ef.SectionByType(elf.SHT_SYMTAB)
	if st == nil {
		return 0, ErrNoSymtab
	}
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		return 0, fmt.Errorf("symbol %s: only 64-bit little-endian ELF is read", name)
	}
	if int(st.Link) <= 0 || int(st.Link) >= len(ef.Sections) {
		return 0, fmt.Errorf("symbol %s: symbol table links to no string table", name)
	}
	ss := ef.Sections[st.Link]
	if ss.Type != elf.SHT_STRTAB || ss.Size > maxStrtab {
		return 0, fmt.Errorf("symbol %s: string table of %d bytes (type %v) not read", name, ss.Size, ss.Type)
	}
	if _, ok := span(ss.Offset, ss.Size, 0, uint64(im.size)); !ok {
		return 0, fmt.Errorf("symbol %s: string table outside the file", name)
	}
	strs, err := ss.Data()
	if err != nil {
		return 0, fmt.Errorf("read string table: %w", err)
	}
	r := bufio.NewReaderSize(st.Open(), 64<<10)
	var e [24]byte // Elf64_Sym
	for {
		if _, err := io.ReadFull(r, e[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, fmt.Errorf("symbol %s: %w", name, errNoSymbol)
			}
			return 0, fmt.Errorf("read symbol table: %w", err)
		}
		off := uint64(binary.LittleEndian.Uint32(e[:]))
		if off+uint64(len(name)) < uint64(len(strs)) &&
			strs[off+uint64(len(name))] == 0 && string(strs[off:off+uint64(len(name))]) == name {
			return binary.LittleEndian.Uint64(e[8:]), nil
		}
	}
}

var errNoSymbol = errors.New("not in the symbol table")

// Symbols returns the link-time values of those of names that the file's
// .symtab holds, in one pass over the table (see Symbol for the bounds).
func (im *Image) Symbols(names []string) (map[string]uint64, error) {
	ef := im.ef
	st := ef.SectionByType(elf.SHT_SYMTAB)
	if st == nil {
		return nil, ErrNoSymtab
	}
	if ef.Class != elf.ELFCLASS64 || ef.Data != elf.ELFDATA2LSB {
		return nil, errors.New("symbols: only 64-bit little-endian ELF is read")
	}
	if int(st.Link) <= 0 || int(st.Link) >= len(ef.Sections) {
		return nil, errors.New("symbols: symbol table links to no string table")
	}
	ss := ef.Sections[st.Link]
	if ss.Type != elf.SHT_STRTAB || ss.Size > maxStrtab {
		return nil, fmt.Errorf("symbols: string table of %d bytes (type %v) not read", ss.Size, ss.Type)
	}
	if _, ok := span(ss.Offset, ss.Size, 0, uint64(im.size)); !ok {
		return nil, errors.New("symbols: string table outside the file")
	}
	strs, err := ss.Data()
	if err != nil {
		return nil, fmt.Errorf("read string table: %w", err)
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]uint64{}
	r := bufio.NewReaderSize(st.Open(), 64<<10)
	var e [24]byte // Elf64_Sym
	for len(out) < len(want) {
		if _, err := io.ReadFull(r, e[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			return nil, fmt.Errorf("read symbol table: %w", err)
		}
		off := uint64(binary.LittleEndian.Uint32(e[:]))
		if off >= uint64(len(strs)) {
			continue
		}
		end := off
		for end < uint64(len(strs)) && strs[end] != 0 && end-off < 256 {
			end++
		}
		if name := strs[off:end]; want[string(name)] {
			out[string(name)] = binary.LittleEndian.Uint64(e[8:])
		}
	}
	return out, nil
}

// Func returns the link-time entry of function name and the start of its
// code (up to limit bytes), found through the Go function table (pclntab),
// which stripped binaries keep.
func (im *Image) Func(name string, limit int) (entry uint64, code []byte, err error) {
	if im.o == nil {
		im.o = parseObject(im.path, im.f, im.size, im.ef, im.id)
	}
	if !im.o.isGo() {
		if im.o.goErr != nil {
			return 0, nil, fmt.Errorf("function %s: %w", name, im.o.goErr)
		}
		return 0, nil, fmt.Errorf("function %s: %w", name, ErrNotGo)
	}
	for _, f := range (&Binary{im.o}).Funcs() {
		if f.Name != name || f.End <= f.Entry {
			continue
		}
		// Read the function alone, not its whole segment (the profiler's
		// object.read keeps segments; an Image is read once).
		n := min(f.End-f.Entry, uint64(limit))
		off, ok := (&Binary{im.o}).FileOffset(f.Entry)
		if _, in := span(off, n, 0, uint64(im.size)); !ok || !in {
			return 0, nil, fmt.Errorf("function %s: its code at %#x is not in the file", name, f.Entry)
		}
		code := make([]byte, n)
		if _, err := im.f.ReadAt(code, int64(off)); err != nil {
			return 0, nil, fmt.Errorf("read code of %s: %w", name, err)
		}
		return f.Entry, code, nil
	}
	return 0, nil, fmt.Errorf("function %s: not in the function table", name)
}

// SectionAt names the section holding link-time address vaddr, "" when no
// section header covers it.
func (im *Image) SectionAt(vaddr uint64) string {
	for _, s := range im.ef.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		if _, ok := span(vaddr, 1, s.Addr, s.Size); ok {
			return s.Name
		}
	}
	return ""
}

// LoadBias returns what a process adds to the file's link-time addresses:
// the start of its first executable mapping of the file, read from maps
// (the process's /proc/PID/maps), less the link-time address of that
// mapping's file offset. exe is the file's path as the process's maps name
// it (the /proc/PID/exe link). A file that is not PIE has no bias.
func (im *Image) LoadBias(maps io.Reader, exe string) (uint64, error) {
	if !im.PIE() {
		return 0, nil
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	loads := &object{}
	for _, p := range im.ef.Progs {
		if p.Type == elf.PT_LOAD {
			loads.loads = append(loads.loads, p.ProgHeader)
		}
	}
	for _, m := range parseMaps(maps) {
		if strings.TrimSuffix(m.path, " (deleted)") != exe {
			continue
		}
		va, ok := loads.vaddr(m.off)
		if !ok {
			return 0, fmt.Errorf("load bias: mapping at file offset %#x is in no segment", m.off)
		}
		return m.start - va, nil
	}
	return 0, fmt.Errorf("load bias: %s is not mapped executable", exe)
}
