package probe

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// ErrAbsent reports a function the target's binary does not have: inlined
// everywhere, renamed in its Go version, or never linked in.
var ErrAbsent = errors.New("not in the binary (inlined, renamed in this Go version, or not linked in)")

// ErrOldGo reports a Go version before the register ABI (1.17), whose
// arguments are on the stack.
var ErrOldGo = errors.New("built by a Go before 1.17 (no register ABI)")

// Target is a process's executable, resolved for probing.
type Target struct {
	// PID is the process's PID in the procfs it was resolved through;
	// kernelPID its PID in gosleuth's own PID namespace, which the
	// kernel's calls take (set by Run).
	PID       int
	kernelPID int
	fs        proc.FS
	// Exe is the path the kernel is given (ROOT/PID/exe: the inode the
	// process runs, even when the file was replaced or deleted).
	Exe       string
	GoVersion string
	bin       *stacks.Binary
	byName    map[string]stacks.Func
}

// Resolve opens process pid's executable through fs and reads its Go
// version and function table.
func Resolve(fs proc.FS, pid int) (*Target, error) {
	exe := fs.PID(pid, "exe")
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		if _, serr := fs.Exe(pid); serr != nil {
			return nil, serr
		}
		return nil, fmt.Errorf("process %d is not a Go program (no Go build information): %w", pid, stacks.ErrNotGo)
	}
	if !atLeast(bi.GoVersion, 1, 17) {
		return nil, fmt.Errorf("process %d: %s: %w", pid, bi.GoVersion, ErrOldGo)
	}
	bin, err := stacks.OpenBinary(exe)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	t := &Target{PID: pid, kernelPID: pid, fs: fs, Exe: exe, GoVersion: bi.GoVersion, bin: bin, byName: map[string]stacks.Func{}}
	for _, f := range bin.Funcs() {
		// An ABI0 wrapper shares its function's name: the real one is the
		// larger.
		if o, ok := t.byName[f.Name]; !ok || f.End-f.Entry > o.End-o.Entry {
			t.byName[f.Name] = f
		}
	}
	return t, nil
}

// atLeast reports whether a version such as "go1.26.8" is at least
// major.minor.
func atLeast(v string, major, minor int) bool {
	v = strings.TrimPrefix(v, "go")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return a > major || a == major && b >= minor
}

// moved lists names that moved between Go versions: the first one the
// binary has is probed.
var moved = map[string][]string{
	"sync.(*Mutex).lockSlow":                {"internal/sync.(*Mutex).lockSlow"}, // Go 1.24
	"sync.runtime_SemacquireMutex":          {"internal/sync.runtime_SemacquireMutex"},
	"internal/sync.(*Mutex).lockSlow":       {"sync.(*Mutex).lockSlow"},
	"internal/sync.runtime_SemacquireMutex": {"sync.runtime_SemacquireMutex"},
}

// Point is where one function is probed.
type Point struct {
	// Name is the function as asked for; Symbol as the binary names it.
	Name, Symbol string
	// Entry is its link-time address, Addr the probe's, Offset the
	// probe's file offset.
	Entry, Addr, Offset uint64
	Kind                Kind
}

// Find resolves a function by name (or its name in the target's Go
// version) to a probe point.
func (t *Target) Find(name string) (Point, error) {
	f, ok := t.byName[name]
	sym := name
	if !ok {
		for _, alt := range moved[name] {
			if f, ok = t.byName[alt]; ok {
				sym = alt
				break
			}
		}
	}
	if !ok {
		return Point{}, fmt.Errorf("%s: %w", name, ErrAbsent)
	}
	code, ok := t.bin.Read(f.Entry, int(min(f.End-f.Entry, 32)))
	if !ok {
		return Point{}, fmt.Errorf("%s: its code is not in the file", name)
	}
	off, kind := ProbePoint(code)
	fo, ok := t.bin.FileOffset(f.Entry + uint64(off))
	if !ok {
		return Point{}, fmt.Errorf("%s: no file offset for %#x", name, f.Entry)
	}
	return Point{Name: name, Symbol: sym, Entry: f.Entry, Addr: f.Entry + uint64(off), Offset: fo, Kind: kind}, nil
}

// Frames symbolizes a link-time address of the target's binary.
func (t *Target) Frames(vaddr uint64) []stacks.Frame { return t.bin.Frames(vaddr) }
