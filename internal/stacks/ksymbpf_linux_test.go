package stacks

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// namerAndFile loads a namer, closed at the test's end, and reads the
// kernel's symbol file to check it against.
func namerAndFile(t *testing.T) (*bpfNamer, *kernelSyms) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.BPF)
	n, err := newBPFNamer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	k := readKallsymsFile("/proc/kallsyms")
	if ok, why := k.usable(); !ok {
		t.Fatal(why)
	}
	return n, k
}

// TestBPFNamer names kernel addresses through the kernel's own lookup and
// checks every name against /proc/kallsyms: the first bytes of functions
// of the core kernel and of modules, and addresses inside them.
func TestBPFNamer(t *testing.T) {
	n, k := namerAndFile(t)
	var addrs []uint64
	step := max(1, len(k.syms)/300)
	for i := 0; i+1 < len(k.syms); i += step {
		s, next := k.syms[i], k.syms[i+1]
		addrs = append(addrs, s.addr)
		if next.addr-s.addr > 2 {
			addrs = append(addrs, s.addr+(next.addr-s.addr)/2)
		}
	}
	names, err := n.lookup(addrs)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(addrs) {
		t.Fatalf("%d names for %d addresses", len(names), len(addrs))
	}
	// Every name the file gives an address: the kernel's lookup names
	// the first of several aliases (__do_sys_gettid at __x64_sys_gettid),
	// the file's parser the last.
	aliases := map[uint64][]string{}
	for line := range strings.Lines(k.text) {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.ContainsAny(f[1], "tTwW") {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err == nil {
			aliases[a] = append(aliases[a], f[2])
		}
	}
	alias := 0
	for i, a := range addrs {
		want, _ := k.lookup(a)
		if names[i] == want {
			continue
		}
		s := k.syms[k.find(a)].addr
		if slices.Contains(aliases[s], names[i]) {
			alias++
			continue
		}
		t.Errorf("%#x: bpf %q, kallsyms %q (aliases %q)", a, names[i], want, aliases[s])
	}
	t.Logf("%d addresses named, %d by another alias", len(addrs), alias)
}

// TestBPFNamerUnknown: addresses outside the kernel's text have no name,
// and a batch longer than the program's is named whole and in order.
func TestBPFNamerUnknown(t *testing.T) {
	n, k := namerAndFile(t)
	known := k.syms[len(k.syms)/2].addr
	addrs := make([]uint64, ksymBatch+3)
	for i := range addrs {
		addrs[i] = known
	}
	addrs[0], addrs[ksymBatch+1] = 0x1000, 0x7ffd00001000
	names, err := n.lookup(addrs)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := k.lookup(known)
	for i, name := range names {
		switch {
		case i == 0 || i == ksymBatch+1:
			if name != "" {
				t.Errorf("address %#x named %q, want none", addrs[i], name)
			}
		case name == "":
			t.Errorf("address %d of %d (%#x) not named, want %q", i, len(addrs), addrs[i], want)
		}
	}
}

func TestSyscallFunc(t *testing.T) {
	for fn, want := range map[string]string{
		"__x64_sys_read": "read", "__do_sys_getppid": "getppid", "__se_sys_write": "write",
		"__arm64_sys_openat": "openat", "__x64_sys_": "", "do_syscall_64": "", "ksys_read": "",
	} {
		if got := syscallFunc(fn); got != want {
			t.Errorf("syscallFunc(%q) = %q, want %q", fn, got, want)
		}
	}
}

// BenchmarkKernelNames names 300 kernel addresses (a profile's usual
// count) through BPF, the program's loading included ("bpf"), and by
// reading and parsing /proc/kallsyms ("kallsyms"), as kernelNames would
// without BPF.
func BenchmarkKernelNames(b *testing.B) {
	testenv.Require(b, testenv.Linux, testenv.Root, testenv.BPF)
	k := readKallsymsFile("/proc/kallsyms")
	var addrs []uint64
	for i := 0; i < len(k.syms) && len(addrs) < 300; i += len(k.syms) / 300 {
		addrs = append(addrs, k.syms[i].addr+1)
	}
	b.Run("bpf", func(b *testing.B) {
		for b.Loop() {
			if _, err := bpfKernelNames(addrs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kallsyms", func(b *testing.B) {
		for b.Loop() {
			k := readKallsymsFile("/proc/kallsyms")
			for _, a := range addrs {
				k.lookup(a)
			}
		}
	})
}
