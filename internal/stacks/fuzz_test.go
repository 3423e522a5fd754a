package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"runtime"
	"testing"
)

// selfPclntab returns the test binary's own pclntab and text address: a real
// table from the toolchain that built the tests.
func selfPclntab(tb testing.TB) (tab []byte, text uint64, file []byte) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	file, err = os.ReadFile(exe)
	if err != nil {
		tb.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(file))
	if err != nil {
		tb.Fatal(err)
	}
	s := ef.Section(".gopclntab")
	if s == nil {
		tb.Fatal("test binary has no .gopclntab")
	}
	tab, err = s.Data()
	if err != nil {
		tb.Fatal(err)
	}
	return tab, ef.Section(".text").Addr, file
}

// TestGoTableHugeNfunc is the crafted binary of the reliability probe: a
// pclntab whose header claims nfunc = 0x7fffffffffffffff. The size check
// overflowed and find indexed funcs[-8:], crashing root's whole-host run.
func TestGoTableHugeNfunc(t *testing.T) {
	tab, text, _ := selfPclntab(t)
	if _, err := newGoTable(tab, text, 0, nil); err != nil {
		t.Fatalf("the genuine table does not parse: %v", err)
	}
	for _, n := range []uint64{0x7fffffffffffffff, 1 << 61, 1<<61 - 1, ^uint64(0), 0} {
		bad := bytes.Clone(tab)
		binary.LittleEndian.PutUint64(bad[8:], n)
		gt, err := newGoTable(bad, text, 0, nil)
		if err == nil {
			// A table that parses must still answer without panicking.
			gt.frames(text+0x1000, nil)
			t.Errorf("nfunc %#x accepted", n)
		}
	}
}

// TestObjectHugeSegment is the other crafted binary: a read-only PT_LOAD
// claiming p_filesz = 1 TiB. The loader allocated the claimed size and the
// whole run died with "out of memory".
func TestObjectHugeSegment(t *testing.T) {
	_, _, file := selfPclntab(t)
	bad := bytes.Clone(file)
	if !claimHugeSegment(bad) {
		t.Fatal("no read-only PT_LOAD in the test binary")
	}
	ef, err := elf.NewFile(bytes.NewReader(bad))
	if err != nil {
		t.Fatalf("the crafted ELF no longer parses: %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	o := parseObject("crafted", bytes.NewReader(bad), int64(len(bad)), ef, "crafted")
	for _, p := range o.loads {
		o.symbolize(p.Vaddr+16, nil)
	}
	for i := range o.loads {
		o.segment(i)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*uint64(len(bad)) {
		t.Errorf("loading a %d-byte binary allocated %d bytes", len(bad), grew)
	}
}

// claimHugeSegment sets p_filesz = p_memsz = 1 TiB in the first read-only
// PT_LOAD of the ELF64 image b.
func claimHugeSegment(b []byte) bool {
	le := binary.LittleEndian
	phoff, phentsize, phnum := le.Uint64(b[0x20:]), int(le.Uint16(b[0x36:])), int(le.Uint16(b[0x38:]))
	for i := 0; i < phnum; i++ {
		ph := b[int(phoff)+i*phentsize:]
		if elf.ProgType(le.Uint32(ph)) == elf.PT_LOAD && elf.ProgFlag(le.Uint32(ph[4:])) == elf.PF_R {
			le.PutUint64(ph[32:], 1<<40)
			le.PutUint64(ph[40:], 1<<40)
			return true
		}
	}
	return false
}

// FuzzGoTable feeds mutated pclntabs to the reader and asks it for frames,
// SP deltas and file:line at PCs in and around the table: it must never
// panic, whatever the bytes.
func FuzzGoTable(f *testing.F) {
	tab, text, _ := selfPclntab(f)
	// Seeds: the genuine table (cut to keep mutation fast), its header with
	// a huge nfunc, and a table with nfunc 1.
	small := tab[:min(len(tab), 1<<16)]
	f.Add(bytes.Clone(small), uint64(0x100))
	huge := bytes.Clone(small)
	binary.LittleEndian.PutUint64(huge[8:], 0x7fffffffffffffff)
	f.Add(huge, uint64(0))
	one := bytes.Clone(small)
	binary.LittleEndian.PutUint64(one[8:], 1)
	f.Add(one, uint64(8))
	f.Fuzz(func(t *testing.T, tab []byte, pc uint64) {
		mem := func(addr uint64, n int) ([]byte, bool) {
			if off, ok := span(addr, uint64(n), text, uint64(len(tab))); ok {
				return tab[off : off+uint64(n)], true
			}
			return nil, false
		}
		gt, err := newGoTable(tab, text, text, mem)
		if err != nil {
			return
		}
		for _, p := range []uint64{text + pc, text + pc%4096, pc, text} {
			gt.frames(p, nil)
			gt.spDelta(p)
		}
	})
}

// FuzzObject feeds mutated ELF images to the object loader and symbolizes
// addresses in each load segment: no panic, and no allocation beyond the
// file's own size (the 1 TiB segment of TestObjectHugeSegment).
func FuzzObject(f *testing.F) {
	for _, p := range []string{"/bin/true", "/bin/sleep"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
			huge := bytes.Clone(b)
			if claimHugeSegment(huge) {
				f.Add(huge)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			return
		}
		o := parseObject("fuzz", bytes.NewReader(b), int64(len(b)), ef, "fuzz")
		for _, p := range o.loads {
			o.symbolize(p.Vaddr, nil)
			o.symbolize(p.Vaddr+p.Filesz/2, nil)
			o.vaddr(p.Off)
		}
		for i := range o.loads {
			if seg := o.segment(i); uint64(len(seg)) > uint64(len(b)) {
				t.Fatalf("segment %d: %d bytes from a %d-byte file", i, len(seg), len(b))
			}
		}
	})
}

// FuzzImage feeds mutated executables to the reader that finds a
// variable's address in another process's binary (Image: the symbol table
// streamed, a function's code through the pclntab, sections by address):
// any user's binary reaches it when root's doctor reads GOMAXPROCS from
// memory, so it must fail with an error, never panic or allocate without
// bound.
func FuzzImage(f *testing.F) {
	for _, p := range []string{"/bin/true", "/bin/sleep"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := dir + "/image"
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		im, err := OpenImage(path)
		if err != nil {
			return
		}
		defer im.Close()
		if v, err := im.Symbol("runtime.gomaxprocs"); err == nil {
			im.SectionAt(v)
		}
		if entry, code, err := im.Func("runtime.GOMAXPROCS", 256); err == nil {
			if len(code) > 256 {
				t.Fatalf("function code of %d bytes, asked for at most 256", len(code))
			}
			im.SectionAt(entry)
		}
		im.LoadBias(bytes.NewReader([]byte("00400000-00452000 r-xp 00000000 08:02 173521 "+path+"\n")), path)
	})
}
