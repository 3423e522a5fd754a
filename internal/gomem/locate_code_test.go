package gomem

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/stacks"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// codeRuleNames are the variables globalsFromCode finds.
func codeRuleNames() []string {
	var names []string
	for _, r := range codeRules {
		names = append(names, r.name)
	}
	return names
}

// symbolsOf reads names from the symbol table of the executable at path.
// Go 1.25 moved runtime.class_to_size to internal/runtime/gc's
// SizeClassToSize: that symbol is returned under the old name.
func symbolsOf(t *testing.T, path string, names []string) map[string]uint64 {
	t.Helper()
	im, err := stacks.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	const sizeClasses = "internal/runtime/gc.SizeClassToSize"
	// A copy: the parallel subtests share names, and append would write
	// into its spare capacity from each of them.
	syms, err := im.Symbols(append(slices.Clip(names), sizeClasses))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := syms[sizeClasses]; ok {
		syms[symClassToSize] = a
	}
	for _, n := range names {
		if _, ok := syms[n]; !ok {
			t.Fatalf("%s: no symbol %s", path, n)
		}
	}
	return syms
}

// fromCode runs globalsFromCode on the executable at path with the table
// layout of the release it was built with.
func fromCode(t *testing.T, path string) (map[string]uint64, error) {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tableLayout(bi.GoVersion)
	if err != nil {
		t.Fatal(err)
	}
	im, err := stacks.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	return globalsFromCode(im, l)
}

// TestLocateFromCode builds the reference program with the newest patch
// of every tabled release, plain and with cgo, each with and without its
// symbol table, and checks that the variables found from the code of the
// stripped build are where the symbol table of the other says. The two
// builds differ only in the tables the linker drops (checked: the code
// found in both gives the same addresses). PIE builds, which recompile
// everything, are made with the first and the last release and with
// go1.25, the last that keeps a PIE's function table in
// .data.rel.ro.gopclntab (all eight passed when the rules were written),
// and so are builds without inlining (-gcflags=all=-l), whose code calls
// the helpers the rules' functions otherwise inline. -race and
// GOAMD64=v3 builds of go1.20, go1.23, go1.26 and go1.27 matched too when the
// rules were written; they are not rebuilt here, for CI's time.
func TestLocateFromCode(t *testing.T) {
	names := codeRuleNames()
	for i, rel := range tabledReleases {
		v := tabledNewest(rel)
		kinds := []refBuild{{toolchain: v}, {toolchain: v, cgo: true}}
		if i == 0 || i == len(tabledReleases)-1 || rel == "go1.25" {
			kinds = append(kinds, refBuild{toolchain: v, pie: true})
		}
		if i == 0 || i == len(tabledReleases)-1 {
			kinds = append(kinds, refBuild{toolchain: v, noinline: true})
		}
		for _, kind := range kinds {
			stripped := kind
			stripped.stripped = true
			t.Run(stripped.String(), func(t *testing.T) {
				t.Parallel()
				plain := buildRef(t, kind)
				want := symbolsOf(t, plain, names)
				same, err := fromCode(t, plain)
				if err != nil {
					t.Fatalf("with symbols: %v", err)
				}
				s := buildRef(t, stripped)
				got, err := fromCode(t, s)
				if err != nil {
					t.Fatalf("stripped: %v", err)
				}
				for _, n := range names {
					if same[n] != want[n] {
						t.Errorf("%s: %#x from the code of the build with symbols, %#x in its symbol table", n, same[n], want[n])
					}
					if got[n] != want[n] {
						t.Errorf("%s: %#x from the stripped build's code, %#x in the symbol table", n, got[n], want[n])
					}
				}
				im, err := stacks.OpenImage(s)
				if err != nil {
					t.Fatal(err)
				}
				defer im.Close()
				if _, err := im.Symbols(names); !errors.Is(err, stacks.ErrNoSymtab) {
					t.Errorf("the stripped build has a symbol table: %v", err)
				}
			})
		}
	}
}

// TestLocateFromCodeBadInput: a non-Go executable, a Go executable whose
// code is overwritten and a missing layout give an error, never a panic.
func TestLocateFromCodeBadInput(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	newest := tabledNewest(tabledReleases[len(tabledReleases)-1])
	l, err := tableLayout(newest)
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range []string{"/bin/true", "/bin/sh"} {
		im, err := stacks.OpenImage(exe)
		if err != nil {
			continue
		}
		addrs, err := globalsFromCode(im, l)
		im.Close()
		if err == nil || len(addrs) != 0 {
			t.Errorf("%s: %v, %v: want an error and nothing", exe, addrs, err)
		}
	}

	src := buildRef(t, refBuild{toolchain: newest, stripped: true})
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	im, err := stacks.OpenImage(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := globalsFromCode(im, nil); err == nil {
		t.Error("no layout: no error")
	}
	im.Close()
	// Overwrite .text with a pattern: the function table (in .gopclntab)
	// still names the functions, their code no longer references anything.
	for _, fill := range []byte{0x00, 0xff, 0x8b} {
		bad := append([]byte(nil), data...)
		off, n := textSpan(t, src)
		for i := off; i < len(bad) && i < off+n; i++ {
			bad[i] = fill
		}
		path := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(path, bad, 0o755); err != nil {
			t.Fatal(err)
		}
		im, err := stacks.OpenImage(path)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := globalsFromCode(im, l)
		im.Close()
		if err == nil {
			t.Errorf("code filled with %#x: found %v, no error", fill, addrs)
		} else if !strings.Contains(err.Error(), "runtime variables from code") {
			t.Errorf("code filled with %#x: error %q does not say what failed", fill, err)
		}
	}
}

// textSpan returns the file offset and size of the executable's .text.
func textSpan(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".text")
	if s == nil {
		t.Fatal("no .text")
	}
	return int(s.Offset), int(s.Size)
}

// FuzzRipRefs: any bytes decode to operands within the code's addresses
// (or wrapped around by a displacement), and every rule's pick takes
// any operand list without panicking.
func FuzzRipRefs(f *testing.F) {
	f.Add([]byte{0x48, 0x8b, 0x05, 0x10, 0, 0, 0}, uint64(0x401000))               // MOV RAX, [rip+16]
	f.Add([]byte{0x80, 0x3d, 0xf0, 0xff, 0xff, 0xff, 0x00, 0x74, 0x0b}, uint64(0)) // CMP byte [rip-16], 0; JE
	f.Add([]byte{0x48, 0xc7, 0x05, 1, 2, 3, 4, 0, 0, 0, 0}, ^uint64(0))            // MOV qword [rip+d], 0
	f.Add([]byte{0x48, 0x8d, 0x05}, uint64(7))                                     // LEA cut short
	// The rules' functions as this test binary has them: real code to mutate.
	if exe, err := os.Executable(); err == nil && runtime.GOARCH == "amd64" {
		if im, err := stacks.OpenImage(exe); err == nil {
			for _, r := range codeRules {
				if entry, code, err := im.Func(r.fn, maxFuncCode); err == nil {
					f.Add(code, entry)
				}
			}
			im.Close()
		}
	}
	f.Fuzz(func(t *testing.T, code []byte, pc uint64) {
		sections := []string{".bss", ".noptrbss", ".noptrdata", ".data", ""}
		refs := ripRefs(code, pc, func(a uint64) string { return sections[a%uint64(len(sections))] })
		if len(refs) > len(code) {
			t.Fatalf("%d operands in %d bytes", len(refs), len(code))
		}
		found := map[string]uint64{symMemProfileRate: pc}
		for _, r := range codeRules {
			r.pick(refs, found)
		}
	})
}
