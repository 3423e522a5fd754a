package stacks

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// kallsymsRef is a reference parser of the kernel's layout, written
// plainly with the strings and strconv packages and a stable sort of elfSym
// records: the tests and FuzzKallsyms compare the parser with it, and
// BenchmarkKallsyms measures both. A line longer than kallsymsMaxLine ends
// it with an error, the symbols before it kept.
func kallsymsRef(text string) (syms []elfSym, zero bool, err error) {
	zero = true
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if len(line) > kallsymsMaxLine {
			err = fmt.Errorf("line %d is longer than %d bytes", i+1, kallsymsMaxLine)
			break
		}
		a, rest, _ := strings.Cut(line, " ")
		typ, rest, _ := strings.Cut(rest, " ")
		if len(typ) != 1 || !strings.Contains("tTwW", typ) {
			continue
		}
		name := rest
		if e := strings.IndexFunc(rest, func(r rune) bool { return r <= ' ' }); e >= 0 {
			name = rest[:e]
		}
		addr, perr := strconv.ParseUint(a, 16, 64)
		if perr != nil || name == "" {
			continue
		}
		if addr != 0 {
			zero = false
		}
		syms = append(syms, elfSym{addr: addr, name: name})
	}
	sort.SliceStable(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	return syms, zero, err
}

// kallsymsRefLookup is the reference's lookup: the last symbol at or below
// addr in the stable order.
func kallsymsRefLookup(syms []elfSym, zero bool, addr uint64) (string, bool) {
	if zero || len(syms) == 0 {
		return "", false
	}
	i := sort.Search(len(syms), func(i int) bool { return syms[i].addr > addr }) - 1
	if i < 0 {
		return "", false
	}
	return syms[i].name, true
}

// kallsymsCompare checks that k answers as the reference does for every
// symbol's address, the addresses beside it, and the extra ones given.
func kallsymsCompare(t *testing.T, k *kernelSyms, syms []elfSym, zero bool, extra ...uint64) {
	t.Helper()
	if k.zero != zero {
		t.Fatalf("zero = %v, the reference says %v", k.zero, zero)
	}
	for i := 1; i < len(k.syms); i++ {
		if k.syms[i-1].addr >= k.syms[i].addr {
			t.Fatalf("symbols %d and %d out of order: %#x, %#x", i-1, i, k.syms[i-1].addr, k.syms[i].addr)
		}
	}
	addrs := append([]uint64{0, ^uint64(0)}, extra...)
	for _, s := range syms {
		addrs = append(addrs, s.addr, s.addr-1, s.addr+1)
	}
	bad := 0
	for _, a := range addrs {
		name, ok := k.lookup(a)
		wname, wok := kallsymsRefLookup(syms, zero, a)
		if name != wname || ok != wok {
			t.Errorf("lookup(%#x) = %q, %v; the reference says %q, %v", a, name, ok, wname, wok)
			if bad++; bad == 10 {
				t.Fatal("and more")
			}
		}
	}
}

// TestKallsyms parses small tables in the kernel's format and damaged ones,
// and compares every answer with the reference's as well.
func TestKallsyms(t *testing.T) {
	type look struct {
		addr uint64
		name string // "" for no symbol
	}
	for _, tc := range []struct {
		name  string
		file  string // under testdata, or
		text  string // the table itself
		zero  bool
		looks []look
	}{
		{
			// Equal addresses, types that are not text between text
			// symbols, module suffixes, and an unsorted module and
			// BPF section after the sorted kernel.
			name: "modules",
			file: "kallsyms-modules.txt",
			looks: []look{
				{0, ""},
				{0xffffffff80ffffff, ""}, // below the first text symbol
				{0xffffffff81000000, "_text"},
				{0xffffffff81000fff, "_text"},
				{0xffffffff81001000, "hypercall_page"},
				{0xffffffff81002000, "xen_hypercall_set_trap_table"},
				{0xffffffff81003000, "arch_cpu_idle_dead"},
				{0xffffffff81003050, "arch_post_acpi_subsys_init"},
				{0xffffffff810030a0, "arch_post_acpi_subsys_init"}, // D skipped
				{0xffffffff81003250, "do_syscall_64"},              // R skipped
				{0xffffffff81003350, "do_syscall_64"},              // b skipped
				{0xffffffff81003400, "vfs_read"},
				{0xffffffffa0000fff, "_etext"},
				{0xffffffffa0001010, "bpf_prog_6deef7357e7b4530_sd_fw_egress"},
				{0xffffffffc0201000, "ftrace_trampoline"},
				{0xffffffffc0900000, "ext4_last_alias"}, // the last of three, not adjacent
				{0xffffffffc0900050, "ext4_last_alias"},
				{0xffffffffc0900100, "ext4_readahead"},
				{0xffffffffc0a04000, "nf_ct_get_tuple"},
				{0xffffffffc0a05000, "nf_conntrack_in"},
				{0xffffffffc0a06000, "nf_conntrack_in"}, // d skipped
				{^uint64(0), "nf_conntrack_in"},
			},
		},
		{
			// What a user who is not root reads.
			name:  "zero",
			file:  "kallsyms-zero.txt",
			zero:  true,
			looks: []look{{0, ""}, {0xffffffff81000000, ""}},
		},
		{
			name: "malformed",
			file: "kallsyms-malformed.txt",
			looks: []look{
				{0xffffffff81000fff, ""}, // every line before first_good is skipped
				{0xffffffff81001000, "first_good"},
				{0xffffffff81003000, "first_good"}, // spaced out and tabbed lines skipped
				{0xffffffff81004000, "leading_zeros"},
				{0xffffffff81005100, "leading_zeros"}, // the lines without a name
				{0xffffffff81006000, "no_trailing_newline"},
			},
		},
		{name: "empty", zero: true, looks: []look{{0, ""}, {1, ""}}},
		{name: "only newlines", text: "\n\n\r\n", zero: true},
		{
			// The kernel writes no CR; one ends a name as a TAB does.
			name:  "crlf",
			text:  "ffffffff81000000 T start\r\nffffffff81000100 t next\r\n\r\n",
			looks: []look{{0xffffffff81000000, "start"}, {0xffffffff81000180, "next"}},
		},
		{
			// A space at the 17th byte, in a name or on the next
			// line, is no 64-bit address's end.
			name:  "short address",
			text:  "1 T abcdefghijkl m\n2 T x\nffffffff81000000 T y\n",
			looks: []look{{1, "abcdefghijkl"}, {2, "x"}, {0xffffffff81000000, "y"}},
		},
		{
			name:  "32-bit kernel",
			text:  "c1000000 T startup_32\nc1000100 T do_one_initcall\n",
			looks: []look{{0xc0ffffff, ""}, {0xc1000050, "startup_32"}, {0xc1000200, "do_one_initcall"}},
		},
		{
			// Only the kernel's single spaces separate the fields.
			name: "other white space",
			text: "ffffffff81000000 T first\nffffffff81000100\vT\fvt_ff\v[mod]\nffffffff81000200  T two_spaces\n" +
				"ffffffff81000300\u00a0T\u2003odd\n ffffffff81000400 T leading\nffffffff81000500 T \v\f\r\n",
			looks: []look{{0xffffffff81000000, "first"}, {0xffffffff81000600, "first"}},
		},
		{
			// A name is every byte up to a space or a control byte.
			name:  "bytes in names",
			text:  "ffffffff81000000 T na\xffme\nffffffff81000100 T a\x00b\nffffffff81000200 T \xc2\u2003x y\n",
			looks: []look{{0xffffffff81000000, "na\xffme"}, {0xffffffff81000100, "a"}, {0xffffffff81000200, "\xc2\u2003x"}},
		},
		{
			name:  "address at zero among others",
			text:  "0000000000000000 T zero_page\nffffffff81000000 T _text\n",
			looks: []look{{0, "zero_page"}, {0xffffffff81000000, "_text"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := tc.text
			if tc.file != "" {
				b, err := os.ReadFile(filepath.Join("testdata", tc.file))
				if err != nil {
					t.Fatal(err)
				}
				text = string(b)
			}
			k := parseKallsyms(text)
			if k.err != nil {
				t.Fatal(k.err)
			}
			if k.zero != tc.zero {
				t.Errorf("zero = %v, want %v", k.zero, tc.zero)
			}
			ok, why := k.usable()
			switch {
			case tc.zero && (ok || !strings.Contains(why, "shows no addresses")):
				t.Errorf("usable() = %v, %q; want false and why", ok, why)
			case !tc.zero && (!ok || why != ""):
				t.Errorf("usable() = %v, %q; want true", ok, why)
			}
			for _, l := range tc.looks {
				name, ok := k.lookup(l.addr)
				if name != l.name || ok != (l.name != "") {
					t.Errorf("lookup(%#x) = %q, %v; want %q", l.addr, name, ok, l.name)
				}
			}
			syms, zero, err := kallsymsRef(text)
			if err != nil {
				t.Fatal(err)
			}
			kallsymsCompare(t, k, syms, zero)
		})
	}
}

// TestKallsymsLongLine checks the bound on a line: a line of
// kallsymsMaxLine bytes is read, a longer one ends the parse with an error,
// the symbols before it kept.
func TestKallsymsLongLine(t *testing.T) {
	const head = "ffffffff81000000 T first\n"
	for _, tc := range []struct {
		name    string
		long    int // bytes of the long line, not counting its LF
		lf, err bool
	}{
		{"fits", kallsymsMaxLine, true, false},
		{"fits at the end", kallsymsMaxLine, false, false},
		{"too long", kallsymsMaxLine + 1, true, true},
		{"too long at the end", kallsymsMaxLine + 1, false, true},
		{"far too long", 3 << 20, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long := "ffffffff81000100 T " + strings.Repeat("x", tc.long-19)
			text := head + long
			if tc.lf {
				text += "\nffffffff81000200 T after\n"
			}
			k := parseKallsyms(text)
			syms, zero, refErr := kallsymsRef(text)
			if (refErr != nil) != tc.err {
				t.Fatalf("the reference's error: %v", refErr)
			}
			if (k.err != nil) != tc.err {
				t.Fatalf("err = %v, want an error: %v", k.err, tc.err)
			}
			if tc.err {
				if !errors.Is(k.err, errKallsymsLine) || !strings.HasPrefix(k.err.Error(), "read kernel symbols: line 2: ") {
					t.Errorf("err = %v", k.err)
				}
				if ok, why := k.usable(); ok || why != k.err.Error() {
					t.Errorf("usable() = %v, %q", ok, why)
				}
			}
			if name, ok := k.lookup(0xffffffff81000000); !ok || name != "first" {
				t.Errorf("the symbol before the long line: %q, %v", name, ok)
			}
			kallsymsCompare(t, k, syms, zero)
		})
	}
}

// TestReadKallsyms checks the reader: reads joined whole, past the room
// made at first too, the size bound, and a read error after some data.
func TestReadKallsyms(t *testing.T) {
	big := strings.Repeat("ffffffff81000000 T some_symbol_name\n", kallsymsGuess/36+7)
	for _, tc := range []struct {
		name  string
		r     io.Reader
		limit int
		want  string
		err   error
	}{
		{"small", strings.NewReader("abc\n"), kallsymsMaxSize, "abc\n", nil},
		{"empty", strings.NewReader(""), kallsymsMaxSize, "", nil},
		{"byte by byte", iotest.OneByteReader(strings.NewReader("ffffffff81000000 T x\n")), kallsymsMaxSize, "ffffffff81000000 T x\n", nil},
		{"past the first room", iotest.HalfReader(strings.NewReader(big)), kallsymsMaxSize, big, nil},
		{"exactly the limit", strings.NewReader(big), len(big), big, nil},
		{"one byte over", strings.NewReader(big), len(big) - 1, big[:len(big)-1], errKallsymsSize},
		{"endless", endlessReader{}, 2*kallsymsRead + 5, strings.Repeat("x", 2*kallsymsRead+5), errKallsymsSize},
		{"no progress", emptyReader{}, kallsymsMaxSize, "", io.ErrNoProgress},
		{"read error", io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(os.ErrPermission)), kallsymsMaxSize, "ab", os.ErrPermission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readKallsyms(tc.r, tc.limit)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Errorf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("read %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
}

// endlessReader is a file that never ends.
type endlessReader struct{}

// Read fills p with 'x'.
func (endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// emptyReader is a broken reader that never returns anything.
type emptyReader struct{}

// Read returns 0, nil.
func (emptyReader) Read(p []byte) (int, error) { return 0, nil }

// TestKallsymsFile reads tables from files: a missing one, and the table
// of the fixture.
func TestKallsymsFile(t *testing.T) {
	k := readKallsymsFile(filepath.Join(t.TempDir(), "kallsyms"))
	if ok, why := k.usable(); ok || !strings.HasPrefix(why, "read kernel symbols: open ") || !errors.Is(k.err, os.ErrNotExist) {
		t.Errorf("a missing file: usable() = %v, %q", ok, why)
	}
	if _, ok := k.lookup(0xffffffff81000000); ok {
		t.Error("a missing file names an address")
	}
	k = readKallsymsFile(filepath.Join("testdata", "kallsyms-modules.txt"))
	if ok, why := k.usable(); !ok {
		t.Fatal(why)
	}
	if name, _ := k.lookup(0xffffffffc0a05010); name != "nf_conntrack_in" {
		t.Errorf("lookup = %q", name)
	}
}

// TestKallsymsReal parses this machine's /proc/kallsyms (root sees the
// addresses), compares every answer with the reference's on the same
// bytes, and checks that loadKallsyms reads it once and names the kernel.
func TestKallsymsReal(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root)
	path := proc.NewFS("").Path("kallsyms")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k := parseKallsyms(string(data))
	if ok, why := k.usable(); !ok {
		t.Fatal(why)
	}
	syms, zero, err := kallsymsRef(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(syms) < 10000 {
		t.Fatalf("only %d text symbols", len(syms))
	}
	kallsymsCompare(t, k, syms, zero)

	lk := loadKallsyms()
	if loadKallsyms() != lk {
		t.Error("loadKallsyms read the file again")
	}
	if ok, why := lk.usable(); !ok {
		t.Fatal(why)
	}
	// The core kernel's text does not move between two reads (modules
	// and BPF programs may come and go).
	a := syms[len(syms)/4].addr + 1
	want, _ := kallsymsRefLookup(syms, zero, a)
	if name, ok := lk.lookup(a); !ok || name != want {
		t.Errorf("loadKallsyms: lookup(%#x) = %q, %v; want %q", a, name, ok, want)
	}
}

// FuzzKallsyms parses any text as a symbol table and compares every answer
// with the reference's (kallsymsRef): the lookup of each symbol's address
// and the addresses beside it, of the fuzzer's address, and the zero flag.
// Where either stops with an error (a line too long), both must.
func FuzzKallsyms(f *testing.F) {
	for _, s := range []string{
		"ffffffff81000000 T srso_alias_untrain_ret\nffffffff81000000 T _stext\nffffffff81000000 T _text\n",
		"0000000000000000 A fixed_percpu_data\nffffffff81001000 T hypercall_page\nffffffff81002000 t xen_hypercall_set_trap_table\nffffffff81003000 W arch_cpu_idle_dead\nffffffff81003080 D init_task\n",
		"ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\nffffffffc0a05000 t nf_conntrack_in\t[nf_conntrack]\nffffffffc0a04000 t nf_ct_get_tuple\t[nf_conntrack]\n",
		"ffffffffa0001000 t bpf_prog_6deef7357e7b4530_sd_fw_egress\t[bpf]\nffffffff81000000 T _text\n",
		"0000000000000000 T _stext\n0000000000000000 t do_syscall_64\n",
		"ffffffff81000000 T a\r\nffffffff81000100\tt  b  [m]\r\nc1000000 w c",
		"ffffffff81000000\u00a0T\u2003odd\u0085[mod]\n1ffffffff81000050 T too_wide\n0xffffffff81000040 T hex_prefix\n",
		"1 T abcdefghijkl m\n2 T x\nffffffff81000000 T y\n",
	} {
		f.Add([]byte(s), uint64(0xffffffff81000080))
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		k := parseKallsyms(string(data))
		k.lookup(addr)
		k.usable()
		syms, zero, err := kallsymsRef(string(data))
		if err != nil {
			if k.err == nil {
				t.Fatalf("the reference stopped (%v), the parser did not", err)
			}
			return
		}
		if k.err != nil {
			t.Fatalf("the parser stopped (%v), the reference did not", k.err)
		}
		kallsymsCompare(t, k, syms, zero, addr, addr-1, addr+1)
	})
}

// BenchmarkKallsyms parses this machine's /proc/kallsyms, read once into
// memory, with the parser ("parse") and with the strings and strconv
// reference ("reference"), and reads and parses the file itself, the
// kernel's cost included, with each ("load", "reference-load"). "unsorted" parses the same lines with the last
// quarter moved first, so the symbols must be sorted.
func BenchmarkKallsyms(b *testing.B) {
	path := proc.NewFS("").Path("kallsyms")
	data, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("needs %s: %v", path, err)
	}
	text := string(data)
	if parseKallsyms(text).zero {
		b.Skipf("%s shows no addresses (needs root, or kernel.kptr_restrict is set)", path)
	}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		var k *kernelSyms
		for b.Loop() {
			k = parseKallsyms(text)
		}
		b.ReportMetric(float64(len(k.syms)), "symbols")
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		var syms []elfSym
		for b.Loop() {
			syms, _, _ = kallsymsRef(text)
		}
		b.ReportMetric(float64(len(syms)), "symbols")
	})
	b.Run("unsorted", func(b *testing.B) {
		lines := strings.SplitAfter(text, "\n")
		q := len(lines) * 3 / 4
		moved := strings.Join(append(lines[q:len(lines):len(lines)], lines[:q]...), "")
		b.ReportAllocs()
		b.SetBytes(int64(len(moved)))
		var k *kernelSyms
		for b.Loop() {
			k = parseKallsyms(moved)
		}
		b.ReportMetric(float64(len(k.syms)), "symbols")
	})
	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if k := readKallsymsFile(path); k.err != nil {
				b.Fatal(k.err)
			}
		}
	})
	b.Run("reference-load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err = kallsymsRef(string(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
