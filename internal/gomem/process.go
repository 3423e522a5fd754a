package gomem

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// Process is a Go process opened for reading its runtime's books. It holds
// no stop, no attachment and no descriptor of the target between reads
// other than its executable's function table. It is not safe for
// concurrent use.
type Process struct {
	// PID is the process read.
	PID int
	// GoVersion is the release the executable was built with ("go1.22.12").
	GoVersion string
	// Layout is the runtime's layout in that release and where it came from.
	Layout *Layout
	// Located says how the runtime's variables were found ("symbol table",
	// "runtime code (stripped binary)").
	Located string

	globals map[string]uint64 // run-time addresses (load bias added)
	bias    uint64
	mem     *Mem
	pfs     proc.FS
	// bin is the executable's function table, opened on first use (a
	// count of goroutines needs none; names and stacks do). binErr says
	// why it could not be; noBin marks a process without one (tests).
	bin    *stacks.Binary
	binErr error
	noBin  bool
	// frames and starts keep symbolized pcs between reads.
	frames, starts map[uint64]Frame
	steps          map[uint64]step
}

// ErrNotGo reports a process whose executable is not a Go program.
var ErrNotGo = errors.New("not a Go program")

// ErrUnknownRelease reports a Go release whose layout is not known: the
// binary has no DWARF and no table covers its release.
var ErrUnknownRelease = errors.New("unknown Go release")

// exeInfo is what is learnt of one executable, kept by its identity.
type exeInfo struct {
	version string
	layout  *Layout
	globals map[string]uint64 // link-time
	located string
	err     error
}

var exeCache = struct {
	sync.Mutex
	m map[string]*exeInfo
}{m: map[string]*exeInfo{}}

const exeCacheMax = 128

// maxDWARFFile bounds the executables whose DWARF is parsed: the layout
// walk reads the runtime's unit only, but a crafted file must not cost
// root's gosleuth more than this.
const maxDWARFFile = 1 << 30

// Open prepares to read process pid's runtime through procfs pfs. It fails
// with ErrNotGo for a process that is not Go, with ErrUnknownRelease where
// the layout of its release is unknown, and with the kernel's error where
// the caller may not read the process (reading needs ptrace access).
func Open(pfs proc.FS, pid int) (*Process, error) {
	exe := pfs.PID(pid, "exe")
	im, err := stacks.OpenImage(exe)
	if err != nil {
		return nil, fmt.Errorf("open executable of process %d: %w", pid, err)
	}
	defer im.Close()
	info := learn(im, exe)
	if info.err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, info.err)
	}
	mem, maps, err := openMem(pfs, pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	var bias uint64
	if im.PIE() {
		target, err := os.Readlink(exe)
		if err != nil {
			return nil, fmt.Errorf("process %d: read executable link: %w", pid, err)
		}
		bias, err = im.LoadBias(mapsReader(maps), target)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
	}
	g := make(map[string]uint64, len(info.globals))
	for k, v := range info.globals {
		g[k] = v + bias
	}
	p := &Process{PID: pid, GoVersion: info.version, Layout: info.layout, Located: info.located,
		globals: g, bias: bias, mem: mem, pfs: pfs}
	if len(p.Layout.WaitReasons) == 0 {
		// A layout from DWARF has no names: read them where the binary's
		// symbol table shows runtime.waitReasonStrings.
		l := *p.Layout
		l.WaitReasons = p.readWaitReasons()
		p.Layout = &l
	}
	return p, nil
}

// Bounds of runtime.waitReasonStrings as read from memory: Go 1.26 has 47
// reasons, each name a few words.
const (
	maxWaitReasons    = 256
	maxWaitReasonName = 64
)

// readWaitReasons reads the names of the wait reasons from the target's
// runtime.waitReasonStrings ([N]string), stopping at the first entry that
// is not a short printable string; nil when the array is not located.
func (p *Process) readWaitReasons() []string {
	a, err := p.addr(symWaitReasons)
	if err != nil {
		return nil
	}
	// One read of the whole bound where it is readable (the array lies in
	// a data segment far larger), else entry by entry to the mapping's end.
	var hdrs [maxWaitReasons * 16]byte
	n := maxWaitReasons
	if p.mem.ReadAt(hdrs[:], a) != nil {
		n = 0
		for n < maxWaitReasons && p.mem.ReadAt(hdrs[n*16:n*16+16], a+uint64(n*16)) == nil {
			n++
		}
	}
	var out []string
	for i := range n {
		ptr, l := binary.LittleEndian.Uint64(hdrs[i*16:]), binary.LittleEndian.Uint64(hdrs[i*16+8:])
		if l == 0 && i == 0 {
			out = append(out, "")
			continue
		}
		if l == 0 || l > maxWaitReasonName {
			break
		}
		b := make([]byte, l)
		if p.mem.ReadAt(b, ptr) != nil || !printable(b) {
			break
		}
		out = append(out, string(b))
	}
	return out
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// learn reads an executable's release, layout and variables, once per
// executable identity.
func learn(im *stacks.Image, exe string) *exeInfo {
	key := im.Key()
	exeCache.Lock()
	info, ok := exeCache.m[key]
	exeCache.Unlock()
	if ok {
		return info
	}
	info = learnExe(im, exe)
	exeCache.Lock()
	if len(exeCache.m) >= exeCacheMax {
		clear(exeCache.m)
	}
	exeCache.m[key] = info
	exeCache.Unlock()
	return info
}

func learnExe(im *stacks.Image, exe string) *exeInfo {
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		return &exeInfo{err: fmt.Errorf("%w (no Go build information: %v)", ErrNotGo, err)}
	}
	info := &exeInfo{version: bi.GoVersion}
	if im.Machine() != elf.EM_X86_64 {
		info.err = fmt.Errorf("%s executable: the runtime reader reads amd64 programs only", im.Machine())
		return info
	}
	// The tables first: they are checked against each release's DWARF by
	// the tests, and a large binary's DWARF costs far more to read (caddy's
	// took 0.87 s and 171 MB). DWARF covers what no table does (a release
	// newer than the tables, a development build).
	l, terr := tableLayout(bi.GoVersion)
	if terr != nil {
		var derr error
		l, derr = dwarfLayout(exe)
		if derr != nil {
			info.err = fmt.Errorf("%w: %v, and %v", ErrUnknownRelease, terr, derr)
			return info
		}
	}
	l.Go = bi.GoVersion
	info.layout = l
	info.globals, info.located, info.err = locateGlobals(im, l)
	return info
}

// dwarfLayout reads the layout from the executable's DWARF.
func dwarfLayout(exe string) (l *Layout, err error) {
	st, err := os.Stat(exe)
	if err != nil {
		return nil, err
	}
	if st.Size() > maxDWARFFile {
		return nil, fmt.Errorf("%w: executable of %d bytes not parsed", ErrNoDWARF, st.Size())
	}
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDWARF, err)
	}
	defer f.Close()
	// debug/dwarf is not hardened against crafted input (it has panicked
	// on malformed sections); a binary is the target's, so a panic there
	// is turned into "no DWARF" instead of ending gosleuth.
	defer func() {
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("%w: malformed debug information (%v)", ErrNoDWARF, r)
		}
	}()
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDWARF, err)
	}
	return layoutFromDWARF(d)
}

// binary returns the executable's function table, nil when it cannot be
// read.
func (p *Process) binary() *stacks.Binary {
	if p.bin == nil && p.binErr == nil && !p.noBin {
		p.bin, p.binErr = stacks.OpenBinary(p.pfs.PID(p.PID, "exe"))
	}
	return p.bin
}

// Close releases the process.
func (p *Process) Close() error { return nil }

// addr returns the run-time address of runtime variable name.
func (p *Process) addr(name string) (uint64, error) {
	a, ok := p.globals[name]
	if !ok || a == 0 {
		return 0, fmt.Errorf("%s not located (%s)", name, p.Located)
	}
	return a, nil
}

// off returns a field's offset or an error naming it.
func (p *Process) off(path string) (uint64, error) {
	o, ok := p.Layout.Off(path)
	if !ok {
		return 0, fmt.Errorf("%s: no such field in %s's runtime", path, p.GoVersion)
	}
	return o, nil
}

// mapsReader renders mappings back into maps lines for Image.LoadBias.
func mapsReader(maps []proc.Mapping) io.Reader {
	var b bytes.Buffer
	for _, m := range maps {
		perms := "r--p"
		if m.Exec {
			perms = "r-xp"
		}
		fmt.Fprintf(&b, "%x-%x %s %x 00:00 0 %s\n", m.Start, m.End, perms, m.Offset, m.Path)
	}
	return &b
}
