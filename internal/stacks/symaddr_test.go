//go:build linux

package stacks

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageSymbolAndFunc: a symbol's value from the streamed .symtab is
// what debug/elf reads, and a function found through the pclntab of the
// stripped build starts where the symbol of the unstripped one says.
func TestImageSymbolAndFunc(t *testing.T) {
	bin := buildPatient(t, "sleeper")
	im, err := OpenImage(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for _, s := range syms {
		if s.Name == "runtime.gomaxprocs" || s.Name == "runtime.main" || s.Name == "main.main" {
			want[s.Name] = s.Value
		}
	}
	if len(want) != 3 {
		t.Fatalf("debug/elf found %v", want)
	}
	for name, v := range want {
		got, err := im.Symbol(name)
		if err != nil || got != v {
			t.Errorf("Symbol(%s) = %#x, %v; debug/elf says %#x", name, got, err, v)
		}
	}
	if _, err := im.Symbol("runtime.gomaxproc"); !errors.Is(err, errNoSymbol) {
		t.Errorf("a prefix of a name was found: %v", err)
	}
	if s := im.SectionAt(want["runtime.gomaxprocs"]); s != ".noptrbss" {
		t.Errorf("runtime.gomaxprocs in section %q, want .noptrbss", s)
	}

	stripped, err := OpenImage(buildPatient(t, "sleeper", "-ldflags=-s -w"))
	if err != nil {
		t.Fatal(err)
	}
	defer stripped.Close()
	if _, err := stripped.Symbol("main.main"); !errors.Is(err, ErrNoSymtab) {
		t.Errorf("stripped binary: %v, want ErrNoSymtab", err)
	}
	for _, i := range []*Image{im, stripped} {
		entry, code, err := i.Func("runtime.main", 32)
		if err != nil || entry != want["runtime.main"] || len(code) != 32 {
			t.Errorf("%s: Func = %#x, %d bytes, %v; symbol at %#x", i.path, entry, len(code), err, want["runtime.main"])
		}
		if _, _, err := i.Func("main.nosuchfunc", 32); err == nil {
			t.Errorf("%s: found a function that is not there", i.path)
		}
	}
}

// TestImageHostile: a symbol table or string table whose header claims
// more than the file holds ends in an error, without a panic or an
// allocation of the claimed size.
func TestImageHostile(t *testing.T) {
	bin := buildPatient(t, "sleeper")
	orig, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	symtab := ef.SectionByType(elf.SHT_SYMTAB)
	strtabIdx := symtab.Link
	symtabIdx := -1
	for i, s := range ef.Sections {
		if s == symtab {
			symtabIdx = i
		}
	}
	ef.Close()
	shoff := binary.LittleEndian.Uint64(orig[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(orig[0x3a:]))
	// Elf64_Shdr: sh_offset at 24, sh_size at 32, sh_link at 40.
	field := func(sec, off uint64) uint64 { return shoff + sec*shentsize + off }
	tests := []struct {
		name  string
		patch func(b []byte)
	}{
		{"strtab size 1 TiB", func(b []byte) { binary.LittleEndian.PutUint64(b[field(uint64(strtabIdx), 32):], 1<<40) }},
		{"strtab past the end", func(b []byte) { binary.LittleEndian.PutUint64(b[field(uint64(strtabIdx), 24):], uint64(len(b))-8) }},
		{"symtab size 1 TiB", func(b []byte) { binary.LittleEndian.PutUint64(b[field(uint64(symtabIdx), 32):], 1<<40) }},
		{"symtab link out of range", func(b []byte) { binary.LittleEndian.PutUint32(b[field(uint64(symtabIdx), 40):], 9999) }},
		{"symtab links to itself", func(b []byte) { binary.LittleEndian.PutUint32(b[field(uint64(symtabIdx), 40):], uint32(symtabIdx)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte(nil), orig...)
			tt.patch(b)
			path := filepath.Join(t.TempDir(), "bin")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			im, err := OpenImage(path)
			if err != nil {
				return // debug/elf refused the file: as good
			}
			defer im.Close()
			// The 1 TiB symbol table streams to the file's end: a name past
			// the table's real end is simply not found.
			if _, err := im.Symbol("runtime.no.such.symbol"); err == nil {
				t.Error("found a symbol that is not there")
			}
		})
	}
}

// TestImageLoadBias: a PIE's bias is its text mapping's start less the
// link-time address of the mapping's file offset; a fixed executable has
// none; a maps without the file is an error.
func TestImageLoadBias(t *testing.T) {
	pie, err := OpenImage(buildPatient(t, "sleeper", "-buildmode=pie"))
	if err != nil {
		t.Fatal(err)
	}
	defer pie.Close()
	var text elf.ProgHeader
	for _, p := range pie.ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p.ProgHeader
			break
		}
	}
	const start = 0x55d0c0000000
	pageOff := text.Off &^ 0xfff
	maps := fmt.Sprintf("%x-%x r--p 00000000 08:01 42 /srv/app\n%x-%x r-xp %08x 08:01 42 /srv/app (deleted)\n",
		start, start+0x1000, start+pageOff, start+pageOff+0x10000, pageOff)
	bias, err := pie.LoadBias(strings.NewReader(maps), "/srv/app (deleted)")
	if want := uint64(start) + pageOff - (text.Vaddr - (text.Off - pageOff)); err != nil || bias != want {
		t.Errorf("bias %#x, %v; want %#x", bias, err, want)
	}
	if _, err := pie.LoadBias(strings.NewReader(maps), "/srv/other"); err == nil {
		t.Error("a file that is not mapped got a bias")
	}
	exe, err := OpenImage(buildPatient(t, "sleeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if bias, err := exe.LoadBias(strings.NewReader(""), "/srv/app"); err != nil || bias != 0 {
		t.Errorf("fixed executable: bias %#x, %v", bias, err)
	}
}
