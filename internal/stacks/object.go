package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"syscall"
)

// object is one loaded ELF file (an executable or shared library) with what
// is needed to symbolize addresses in it.
type object struct {
	path    string
	buildID string
	loads   []elf.ProgHeader // PT_LOAD segments
	segs    map[int][]byte   // loaded segment contents, by index in loads
	f       io.ReaderAt
	size    int64 // of the file: no segment may claim more
	ef      *elf.File
	relocs  map[uint64]uint64 // R_X86_64_RELATIVE: slot address -> addend (PIE)
	syms    []elfSym          // function symbols, sorted by address
	gt      *goTable          // nil for non-Go binaries
	goErr   error             // why gt is nil for a binary that looked like Go
	mu      sync.Mutex
}

type elfSym struct {
	addr, size uint64
	name       string
}

// objectCache keeps loaded objects by build ID (or path and size when the
// file has none), so the same binary mapped into several processes, or
// profiled twice, is parsed once.
var objectCache = struct {
	sync.Mutex
	m map[string]*object
}{m: map[string]*object{}}

// loadObject opens and parses the ELF file at path (use /proc/PID/root/...
// or /proc/PID/exe to reach the target's view of the file system), or
// returns the object already loaded from the same file.
func loadObject(path string) (*object, error) {
	f, size, ef, id, key, err := openObject(path)
	if err != nil {
		return nil, err
	}
	objectCache.Lock()
	if o, ok := objectCache.m[key]; ok {
		objectCache.Unlock()
		f.Close()
		return o, nil
	}
	objectCache.Unlock()
	o := parseObject(path, f, size, ef, id)
	objectCache.Lock()
	if prev, ok := objectCache.m[key]; ok {
		o = prev // another goroutine won the race; ours is dropped
	} else {
		objectCache.m[key] = o
	}
	objectCache.Unlock()
	return o, nil
}

// openObject opens path as ELF and returns its size, build ID ("" when it
// has none) and cache key. The key is the file's identity (device, inode,
// size, modification time) with the build ID: a build ID alone is written
// by whoever built the binary, and a copied or crafted one put another
// binary's symbols on a process's samples (research defect 11).
func openObject(path string) (f *os.File, size int64, ef *elf.File, id, key string, err error) {
	f, err = os.Open(path)
	if err != nil {
		return nil, 0, nil, "", "", fmt.Errorf("open binary: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, "", "", fmt.Errorf("stat binary: %w", err)
	}
	ef, err = elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, "", "", fmt.Errorf("read ELF %s: %w", path, err)
	}
	id = buildID(ef)
	key = fmt.Sprintf("%s|%s|%d|%d", id, fileIdentity(st), st.Size(), st.ModTime().UnixNano())
	return f, st.Size(), ef, id, key, nil
}

// parseObject reads the symbol tables of an opened ELF file of size bytes.
// The file may be anyone's (a binary another user runs), so every size and
// offset in it is checked against the file before it is used.
func parseObject(path string, f io.ReaderAt, size int64, ef *elf.File, id string) *object {
	o := &object{path: path, buildID: id, f: f, size: size, ef: ef, segs: map[int][]byte{}}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, p.ProgHeader)
		}
	}
	o.loadSymbols()
	o.loadGo()
	return o
}

// buildID returns the GNU build ID, else the Go build ID, else "".
func buildID(ef *elf.File) string {
	for _, name := range []string{".note.gnu.build-id", ".note.go.buildid"} {
		s := ef.Section(name)
		if s == nil {
			continue
		}
		b, err := s.Data()
		if err != nil || len(b) < 16 {
			continue
		}
		namesz := binary.LittleEndian.Uint32(b)
		descsz := binary.LittleEndian.Uint32(b[4:])
		off := 12 + (namesz+3)&^3
		if uint64(off)+uint64(descsz) > uint64(len(b)) {
			continue
		}
		desc := b[off : off+descsz]
		if name == ".note.go.buildid" {
			return "go:" + string(desc)
		}
		return hex.EncodeToString(desc)
	}
	return ""
}

func (o *object) loadSymbols() {
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Name == "" {
				continue
			}
			o.syms = append(o.syms, elfSym{s.Value, s.Size, s.Name})
		}
	}
	if s, err := o.ef.Symbols(); err == nil {
		add(s)
	}
	if s, err := o.ef.DynamicSymbols(); err == nil {
		add(s)
	}
	sort.Slice(o.syms, func(i, j int) bool { return o.syms[i].addr < o.syms[j].addr })
}

// segment returns the file contents of load segment i, read once.
func (o *object) segment(i int) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	if b, ok := o.segs[i]; ok {
		return b
	}
	p := o.loads[i]
	var b []byte
	// A header may claim any size: read only what the file holds (a 1 TiB
	// p_filesz must not become a 1 TiB allocation).
	if _, ok := span(p.Off, p.Filesz, 0, uint64(o.size)); ok {
		b = make([]byte, p.Filesz)
		if _, err := o.f.ReadAt(b, int64(p.Off)); err != nil {
			b = nil
		}
	}
	o.segs[i] = b
	return b
}

// read returns n bytes at link-time address vaddr from the file.
func (o *object) read(vaddr uint64, n int) ([]byte, bool) {
	for i, p := range o.loads {
		if off, ok := span(vaddr, uint64(n), p.Vaddr, p.Filesz); ok {
			b := o.segment(i)
			if b == nil {
				return nil, false
			}
			return b[off : off+uint64(n)], true
		}
	}
	return nil, false
}

// span reports whether [addr, addr+n) lies inside [base, base+size), and
// the offset of addr from base; it never overflows, whatever the values.
func span(addr, n, base, size uint64) (uint64, bool) {
	if addr < base || n > size {
		return 0, false
	}
	off := addr - base
	return off, off <= size-n
}

// readPtr reads a pointer stored at vaddr, applying a relative relocation
// (position-independent binaries store 0 there and the value in .rela.dyn).
func (o *object) readPtr(vaddr uint64) uint64 {
	b, ok := o.read(vaddr, 8)
	if !ok {
		return 0
	}
	v := binary.LittleEndian.Uint64(b)
	if v == 0 && o.ef.Type == elf.ET_DYN {
		o.loadRelocs()
		v = o.relocs[vaddr]
	}
	return v
}

func (o *object) loadRelocs() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.relocs != nil {
		return
	}
	o.relocs = map[uint64]uint64{}
	s := o.ef.Section(".rela.dyn")
	if s == nil {
		return
	}
	b, err := s.Data()
	if err != nil {
		return
	}
	const rRelative = 8 // R_X86_64_RELATIVE
	for i := 0; i+24 <= len(b); i += 24 {
		off := binary.LittleEndian.Uint64(b[i:])
		info := binary.LittleEndian.Uint64(b[i+8:])
		if info&0xffffffff == rRelative {
			o.relocs[off] = binary.LittleEndian.Uint64(b[i+16:])
		}
	}
}

// loadGo finds the pclntab and the moduledata fields it needs (text and
// gofunc): from the .go.module section (Go 1.26), the
// runtime.firstmoduledata symbol, or a scan of the data sections for the
// pointer to the pclntab.
func (o *object) loadGo() {
	tabAddr, tab := o.findPclntab()
	if tab == nil {
		return
	}
	magic := binary.LittleEndian.Uint32(tab)
	textIdx, gofuncIdx := uint64(22), uint64(40)
	if magic == magicGo118 {
		gofuncIdx = 38 // no covctrs before Go 1.20
	}
	var text, gofunc uint64
	if md := o.findModuledata(tabAddr); md != 0 {
		// Go 1.27 put typedesclen after types, and itaboffset and
		// itabsize before rodata: gofunc moved by three words. Word 38
		// is etypes before (not below types) and a length after.
		if magic == magicGo120 && o.readPtr(md+38*8) < o.readPtr(md+37*8) {
			gofuncIdx = 43
		}
		text = o.readPtr(md + textIdx*8)
		gofunc = o.readPtr(md + gofuncIdx*8)
		if !o.isExecAddr(text) {
			text = 0
		}
		if _, ok := o.read(gofunc, 1); !ok {
			gofunc = 0
		}
	}
	if text == 0 {
		text = o.symbolAddr("runtime.text")
	}
	gt, err := newGoTable(tab, text, gofunc, o.read)
	if err != nil && text == 0 {
		if s := o.ef.Section(".text"); s != nil {
			gt, err = newGoTable(tab, s.Addr, gofunc, o.read)
		}
	}
	if err != nil {
		o.goErr = err
		return
	}
	o.gt = gt
}

func (o *object) isExecAddr(a uint64) bool {
	for _, p := range o.loads {
		if p.Flags&elf.PF_X != 0 && a >= p.Vaddr && a < p.Vaddr+p.Memsz {
			return true
		}
	}
	return false
}

func (o *object) symbolAddr(name string) uint64 {
	syms, err := o.ef.Symbols()
	if err != nil {
		return 0
	}
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	return 0
}

var pclnMagics = [][]byte{{0xf1, 0xff, 0xff, 0xff, 0, 0}, {0xf0, 0xff, 0xff, 0xff, 0, 0}}

// findPclntab returns the pclntab's address and contents (to the end of
// its segment).
func (o *object) findPclntab() (uint64, []byte) {
	// A PIE keeps it in .data.rel.ro.gopclntab (Go 1.20 to 1.25; the
	// section header stays when the symbol table is stripped).
	for _, name := range []string{".gopclntab", ".data.rel.ro.gopclntab"} {
		if s := o.ef.Section(name); s != nil {
			if b, err := s.Data(); err == nil && len(b) > 64 {
				return s.Addr, b
			}
		}
	}
	if a := o.symbolAddr("runtime.pclntab"); a != 0 {
		return o.tail(a)
	}
	// Last resort: scan read-only segments for the header magic.
	for i, p := range o.loads {
		if p.Flags&(elf.PF_W|elf.PF_X) != 0 {
			continue
		}
		b := o.segment(i)
		for _, m := range pclnMagics {
			for off := 0; ; {
				j := bytes.Index(b[off:], m)
				if j < 0 {
					break
				}
				at := off + j
				if at%8 == 0 && at+8 <= len(b) && b[at+7] == 8 && (b[at+6] == 1) {
					return p.Vaddr + uint64(at), b[at:]
				}
				off = at + 1
			}
		}
	}
	return 0, nil
}

// tail returns the bytes from vaddr to the end of its segment.
func (o *object) tail(vaddr uint64) (uint64, []byte) {
	for i, p := range o.loads {
		if off, ok := span(vaddr, 1, p.Vaddr, p.Filesz); ok {
			if b := o.segment(i); b != nil {
				return vaddr, b[off:]
			}
		}
	}
	return 0, nil
}

// findModuledata returns the address of the moduledata whose first word
// points at the pclntab.
func (o *object) findModuledata(tabAddr uint64) uint64 {
	if s := o.ef.Section(".go.module"); s != nil && o.readPtr(s.Addr) == tabAddr {
		return s.Addr
	}
	if a := o.symbolAddr("runtime.firstmoduledata"); a != 0 && o.readPtr(a) == tabAddr {
		return a
	}
	if o.ef.Type == elf.ET_DYN {
		o.loadRelocs()
		for slot, v := range o.relocs {
			if v == tabAddr && o.readPtr(slot+22*8) != 0 {
				return slot
			}
		}
	}
	for _, name := range []string{".noptrdata", ".data", ".data.rel.ro"} {
		s := o.ef.Section(name)
		if s == nil {
			continue
		}
		b, err := s.Data()
		if err != nil {
			continue
		}
		for off := 0; off+8 <= len(b); off += 8 {
			if binary.LittleEndian.Uint64(b[off:]) == tabAddr {
				return s.Addr + uint64(off)
			}
		}
	}
	return 0
}

// vaddr converts an offset in the file (from /proc/PID/maps) to a
// link-time virtual address.
func (o *object) vaddr(fileOff uint64) (uint64, bool) {
	for _, p := range o.loads {
		if off, ok := span(fileOff, 1, p.Off, p.Filesz); ok {
			return p.Vaddr + off, true
		}
	}
	return 0, false
}

// symbolize appends the frames at link-time address vaddr. ok is false
// when nothing in the file covers it.
func (o *object) symbolize(vaddr uint64, dst []Frame) ([]Frame, bool) {
	if o.gt != nil {
		if out, ok := o.gt.frames(vaddr, dst); ok {
			return out, true
		}
	}
	i := sort.Search(len(o.syms), func(i int) bool { return o.syms[i].addr > vaddr }) - 1
	if i >= 0 {
		s := o.syms[i]
		if vaddr < s.addr+s.size || (s.size == 0 && vaddr-s.addr < 1<<16) {
			return append(dst, Frame{Func: s.name}), true
		}
	}
	return dst, false
}

// spDelta returns the Go stack-pointer delta at vaddr (see goTable.spDelta).
func (o *object) spDelta(vaddr uint64) (int32, bool) {
	if o.gt == nil {
		return 0, false
	}
	return o.gt.spDelta(vaddr)
}

// isGo reports whether the object has a usable Go function table.
func (o *object) isGo() bool { return o.gt != nil }

// fileIdentity names the file behind st: device and inode where the
// platform gives them.
func fileIdentity(st os.FileInfo) string {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%v:%v", s.Dev, s.Ino)
	}
	return st.Name()
}
