package stacks

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// The parser below is written by hand, not with bufio.Scanner and
// bytes.Fields, because it runs in every gosleuth process that names kernel
// frames: /proc/kallsyms has over 100,000 lines (about 5 MB), and the
// general tools cost a string and a field slice per line, a strconv call per
// address and a sort of 40-byte records, some 30 ms of CPU on top of the
// kernel's own cost of printing the file. Here the file is read into one
// string, a symbol is 16 bytes pointing into it, a line is scanned once with
// its address decoded on the way, and the sort is skipped when the file is
// already in address order (the core kernel's part always is): about 3 ms,
// and no allocation but the string and the symbols.
//
// It reads the one layout the kernel writes (kernel/kallsyms.c, s_show):
// "%px %c %s\n", or "%px %c %s\t[%s]\n" for a module's symbol, the address
// in hex (16 digits, 8 on a 32-bit kernel). A line in any other layout is
// skipped. FuzzKallsyms checks it against a reference written with the
// strings and strconv packages.

const (
	// kallsymsRead is the size of the read buffer: the kernel returns a
	// page per read of /proc/kallsyms, whatever the buffer.
	kallsymsRead = 64 << 10
	// kallsymsGuess is the room made for the file before reading it (a
	// /proc file's size reads as 0): a kernel's is about 5 to 10 MB. A
	// larger one grows the room by doubling.
	kallsymsGuess = 8 << 20
	// kallsymsMaxSize bounds the file: a kernel's is about 5 MB, and one
	// larger than this is not a symbol table to keep in memory.
	kallsymsMaxSize = 64 << 20
	// kallsymsMaxLine bounds a line, counting a CR before its LF but not
	// the LF: the bound bufio.Scanner had when it read the file (a name
	// is at most 512 bytes). A longer line ends the parse with an error.
	kallsymsMaxLine = 1<<20 - 1
)

// errKallsymsSize and errKallsymsLine are the bounds' errors.
var (
	errKallsymsSize = fmt.Errorf("file is larger than %d MiB", kallsymsMaxSize>>20)
	errKallsymsLine = fmt.Errorf("line is longer than %d bytes", kallsymsMaxLine)
)

// kernelSyms is /proc/kallsyms: kernel and module text symbols sorted by
// address.
type kernelSyms struct {
	// text is the file as read; the names in syms are slices of it.
	text string
	// syms holds one symbol per address, sorted by address: of several
	// symbols at one address, the last in the file.
	syms []ksym
	// zero is true when every address read as 0: the kernel hides them
	// (kptr_restrict, or not root).
	zero bool
	err  error
}

// ksym is one text symbol: its address and where its name lies in
// kernelSyms.text.
type ksym struct {
	addr uint64
	off  uint32 // kallsymsMaxSize keeps offsets within 32 bits
	n    uint32
}

var kallsymsCache struct {
	sync.Mutex
	k *kernelSyms
}

// loadKallsyms reads /proc/kallsyms once per gosleuth process.
func loadKallsyms() *kernelSyms {
	kallsymsCache.Lock()
	defer kallsymsCache.Unlock()
	if kallsymsCache.k == nil {
		kallsymsCache.k = readKallsymsFile(proc.NewFS("").Path("kallsyms"))
	}
	return kallsymsCache.k
}

// readKallsymsFile reads and parses the kernel symbol table at path. On a
// read error the symbols read before it are kept, with the error.
func readKallsymsFile(path string) *kernelSyms {
	f, err := os.Open(path)
	if err != nil {
		return &kernelSyms{err: fmt.Errorf("read kernel symbols: %w", err)}
	}
	defer f.Close()
	text, err := readKallsyms(f, kallsymsMaxSize)
	k := parseKallsyms(text)
	if err != nil && k.err == nil {
		k.err = fmt.Errorf("read kernel symbols: %w", err)
	}
	return k
}

// readKallsyms reads r to its end into one string of at most limit bytes.
// On an error, or when r holds more than limit bytes, it returns what it
// read with the error.
//
// The string is built in one allocation of kallsymsGuess bytes, not zeroed
// (a strings.Builder's), through one small read buffer. Reading into fresh
// 1 MB chunks and joining them allocated the file's size twice more, and in
// a process of its own took some 15 ms longer, most of it in the garbage
// collections those allocations set off: more than the parse.
func readKallsyms(r io.Reader, limit int) (string, error) {
	var b strings.Builder
	b.Grow(min(kallsymsGuess, limit))
	buf := make([]byte, kallsymsRead)
	for empty := 0; ; {
		n, err := r.Read(buf)
		if n > limit-b.Len() {
			b.Write(buf[:limit-b.Len()])
			return b.String(), errKallsymsSize
		}
		b.Write(buf[:n])
		switch {
		case err == io.EOF:
			return b.String(), nil
		case err != nil:
			return b.String(), err
		case n > 0:
			empty = 0
		case empty == 99:
			return b.String(), io.ErrNoProgress
		default:
			empty++
		}
	}
}

// parseKallsyms parses lines "ffffffff81000000 T _stext [module]", keeping
// text symbols (t, T, w, W). Lines that are not such a symbol are skipped;
// a line longer than kallsymsMaxLine ends the parse with an error, keeping
// the symbols before it.
func parseKallsyms(text string) *kernelSyms {
	// Real lines average 44 bytes, nearly all of them text symbols.
	k := &kernelSyms{text: text, zero: true, syms: make([]ksym, 0, len(text)/40)}
	if len(text) > kallsymsMaxSize {
		k.err = fmt.Errorf("read kernel symbols: %w", errKallsymsSize)
		return k
	}
	sorted := true
	for pos, line := 0, 1; pos < len(text); line++ {
		// The fields hold no byte at or below a space: the line is
		// parsed first, and its end looked for after the name.
		addr, name, n, ok := kallsymsLine(text[pos:])
		stop := pos + name + n
		end := strings.IndexByte(text[stop:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += stop
		}
		if end-pos > kallsymsMaxLine {
			k.err = fmt.Errorf("read kernel symbols: line %d: %w", line, errKallsymsLine)
			break
		}
		name += pos
		pos = end + 1
		if !ok {
			continue
		}
		if addr != 0 {
			k.zero = false
		}
		s := ksym{addr: addr, off: uint32(name), n: uint32(n)}
		if last := len(k.syms) - 1; last >= 0 && k.syms[last].addr >= addr {
			if k.syms[last].addr == addr {
				// The later symbol at an address names it.
				k.syms[last] = s
				continue
			}
			sorted = false
		}
		k.syms = append(k.syms, s)
	}
	if !sorted {
		// Modules' and BPF programs' symbols follow the kernel's, in
		// no order. A stable sort keeps the file's order at equal
		// addresses, and of those the last is kept.
		slices.SortStableFunc(k.syms, func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) })
		j := 0
		for i := range k.syms {
			if j > 0 && k.syms[j-1].addr == k.syms[i].addr {
				j--
			}
			k.syms[j] = k.syms[i]
			j++
		}
		k.syms = k.syms[:j]
	}
	if k.zero {
		// Nothing will be named: keep none of it.
		k.text, k.syms = "", nil
	}
	return k
}

// unhex is the value of every hex digit, and 16 for every other byte.
var unhex = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 16
		}
	}
	return t
}()

// kallsymsLine parses the line at the start of l in the kernel's layout: a
// hex address of at most 64 bits, one space, one of the text types t, T, w
// or W, one space, and the name, which ends at the first space or ASCII
// control character (the TAB before a module's name, or the LF). It returns
// the address and where in l the name starts and how long it is, or false
// when the line is not a text symbol in that layout. It never reads a field
// past the line's LF; name+n is where it stopped, or 0 when it gave up.
func kallsymsLine(l string) (addr uint64, name, n int, ok bool) {
	i := 0
	if len(l) > 16 && l[16] == ' ' {
		// A 64-bit kernel's 16 digits, read without a test per digit:
		// a byte that is not a digit sets bit 4 of all.
		var all byte
		for _, c := range []byte(l[:16]) {
			d := unhex[c]
			all |= d
			addr = addr<<4 | uint64(d)
		}
		if all > 15 {
			addr = 0 // not the usual layout: read by the loop below
		} else {
			i = 16
		}
	}
	for ; i < len(l) && l[i] != ' '; i++ {
		d := unhex[l[i]]
		if d > 15 || addr>>60 != 0 {
			return 0, 0, 0, false // not hex, or more than 64 bits
		}
		addr = addr<<4 | uint64(d)
	}
	if i == 0 || i+3 >= len(l) || l[i+2] != ' ' {
		return 0, 0, 0, false
	}
	switch l[i+1] {
	case 't', 'T', 'w', 'W':
	default:
		return 0, 0, 0, false
	}
	name = i + 3
	e := name
	for e < len(l) && l[e] > ' ' {
		e++
	}
	if e == name {
		return 0, 0, 0, false
	}
	return addr, name, e - name, true
}

// lookup returns the symbol containing addr (the closest one at or below
// it).
func (k *kernelSyms) lookup(addr uint64) (string, bool) {
	i := k.find(addr)
	if i < 0 {
		return "", false
	}
	s := k.syms[i]
	return k.text[s.off : s.off+s.n], true
}

// find returns the index in k.syms of the symbol containing addr, or -1.
func (k *kernelSyms) find(addr uint64) int {
	if k.zero || len(k.syms) == 0 {
		return -1
	}
	// The first symbol above addr; the one before it holds addr.
	lo, hi := 0, len(k.syms)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if k.syms[m].addr > addr {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo - 1
}

// usable reports whether kernel addresses can be named, and if not why.
func (k *kernelSyms) usable() (bool, string) {
	switch {
	case k.err != nil:
		return false, k.err.Error()
	case k.zero:
		return false, "the kernel symbol table (kallsyms) shows no addresses (needs root, or kernel.kptr_restrict is set): kernel frames stay as addresses"
	}
	return true, ""
}
