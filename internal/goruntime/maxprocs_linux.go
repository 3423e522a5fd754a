//go:build linux

package goruntime

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// maxGOMAXPROCS bounds a value read from memory: the runtime takes any
// positive int32, but more than 2^20 Ps is a wrong address, not a setting.
const maxGOMAXPROCS = 1 << 20

// varLoc is where an executable keeps runtime.gomaxprocs: its link-time
// address and how it was found, or why not.
type varLoc struct {
	addr uint64
	how  string
	err  error
}

// locCache keeps varLoc by executable identity (stacks.Image.Key): the
// exporter looks at every Go process again and again, and reading a symbol
// table or a function table costs milliseconds. Bounded: cleared when full.
var locCache = struct {
	sync.Mutex
	m map[string]varLoc
}{m: map[string]varLoc{}}

const locCacheMax = 256

// liveGOMAXPROCS reads the GOMAXPROCS process pid runs with from its
// memory: the runtime keeps it in runtime.gomaxprocs (an int32), which
// every way of setting it writes (the environment at start, a
// runtime.GOMAXPROCS call, Go 1.25's updates on a cgroup limit change).
// exe is the executable's path as /proc/PID/exe names it (the maps of a PIE
// process are found by it). Reading another process's memory needs ptrace
// access (root, or the same user where Yama allows it). An error wrapping
// errNotLocated says the executable does not show where the variable is.
func liveGOMAXPROCS(pfs proc.FS, pid int, exe string) (n int, how string, err error) {
	im, err := stacks.OpenImage(pfs.PID(pid, "exe"))
	if err != nil {
		return 0, "", fmt.Errorf("open executable: %w", err)
	}
	defer im.Close()
	loc := locate(im)
	if loc.err != nil {
		return 0, "", loc.err
	}
	addr := loc.addr
	if im.PIE() {
		if exe == "" {
			return 0, "", errors.New("PIE executable's path unknown: load bias unknown")
		}
		mf, err := os.Open(pfs.PID(pid, "maps"))
		if err != nil {
			return 0, "", fmt.Errorf("open maps: %w", err)
		}
		bias, err := im.LoadBias(io.LimitReader(mf, 64<<20), exe)
		mf.Close()
		if err != nil {
			return 0, "", err
		}
		addr += bias
	}
	if addr < 4096 || addr > math.MaxInt64-4 {
		return 0, "", fmt.Errorf("runtime.gomaxprocs at %#x: not a user address", addr)
	}
	mem, err := os.Open(pfs.PID(pid, "mem"))
	if err != nil {
		return 0, "", fmt.Errorf("open memory: %w", err)
	}
	defer mem.Close()
	var b [4]byte
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		return 0, "", fmt.Errorf("read runtime.gomaxprocs at %#x: %w", addr, err)
	}
	// A process still in its runtime's start (before schedinit) holds 0.
	v := int32(binary.LittleEndian.Uint32(b[:]))
	if v < 1 || v > maxGOMAXPROCS {
		return 0, "", fmt.Errorf("runtime.gomaxprocs at %#x holds %d: not a GOMAXPROCS", addr, v)
	}
	return int(v), loc.how, nil
}

// locate finds runtime.gomaxprocs in im, once per executable.
func locate(im *stacks.Image) varLoc {
	key := im.Key()
	locCache.Lock()
	l, ok := locCache.m[key]
	locCache.Unlock()
	if ok {
		return l
	}
	l = findGomaxprocs(im)
	locCache.Lock()
	if len(locCache.m) >= locCacheMax {
		clear(locCache.m)
	}
	locCache.m[key] = l
	locCache.Unlock()
	return l
}

// findGomaxprocs finds runtime.gomaxprocs by its symbol, else, in a
// stripped amd64 binary, through the code of runtime.GOMAXPROCS, which
// reads it right after taking sched.lock: `ret := int(gomaxprocs)`, a
// MOVSXD from a RIP-relative address in every Go from 1.19 to 1.26 (node
// exporter's 1.19; 1.20 to 1.26, with -race and PIE, match the symbol). The
// candidate must fall in .noptrbss, where the linker puts an int32
// without pointers, and the value read must be a plausible GOMAXPROCS.
func findGomaxprocs(im *stacks.Image) varLoc {
	addr, err := im.Symbol("runtime.gomaxprocs")
	if err == nil {
		if addr == 0 || addr%4 != 0 {
			return varLoc{err: fmt.Errorf("%w: symbol runtime.gomaxprocs at %#x", errNotLocated, addr)}
		}
		return varLoc{addr: addr, how: "runtime.gomaxprocs"}
	}
	if !errors.Is(err, stacks.ErrNoSymtab) {
		return varLoc{err: fmt.Errorf("%w: %w", errNotLocated, err)}
	}
	return gomaxprocsFromCode(im)
}

// gomaxprocsFromCode finds runtime.gomaxprocs through the code of
// runtime.GOMAXPROCS (see findGomaxprocs).
func gomaxprocsFromCode(im *stacks.Image) varLoc {
	if im.Machine() != elf.EM_X86_64 {
		return varLoc{err: fmt.Errorf("%w: stripped binary (no symbol table; its code is read on amd64 only)", errNotLocated)}
	}
	entry, code, err := im.Func("runtime.GOMAXPROCS", 256)
	if err != nil {
		return varLoc{err: fmt.Errorf("%w: stripped binary: %w", errNotLocated, err)}
	}
	for _, a := range ripLoads32(code, entry) {
		if a%4 == 0 && im.SectionAt(a) == ".noptrbss" {
			return varLoc{addr: a, how: "runtime.gomaxprocs, located through the code of runtime.GOMAXPROCS: no symbol table"}
		}
	}
	return varLoc{err: fmt.Errorf("%w: stripped binary: no load of runtime.gomaxprocs recognized in runtime.GOMAXPROCS", errNotLocated)}
}

// ripLoads32 returns the addresses that 32-bit RIP-relative loads in code
// (x86-64, starting at address pc) read, in order: MOV r32, [rip+disp32]
// (8B /r) and MOVSXD r64, [rip+disp32] (REX.W 63 /r), with or without a
// REX prefix. Code is not decoded instruction by instruction, so a match
// may start inside another instruction: the caller checks where each
// address falls.
func ripLoads32(code []byte, pc uint64) []uint64 {
	var out []uint64
	isREX := func(b byte) bool { return b&0xf0 == 0x40 }
	for i := range code {
		j, rex := i, byte(0)
		if isREX(code[j]) {
			rex, j = code[j], j+1
		} else if i > 0 && isREX(code[i-1]) {
			continue // the opcode of the prefix before, looked at with it
		}
		if j+6 > len(code) {
			break
		}
		op, modrm := code[j], code[j+1]
		if modrm&0xc7 != 0x05 { // mod 00, r/m 101: [rip+disp32]
			continue
		}
		if !(op == 0x63 && rex&0x08 != 0 || op == 0x8b && rex&0x08 == 0) {
			continue
		}
		disp := int64(int32(binary.LittleEndian.Uint32(code[j+2:])))
		next := pc + uint64(j+6)
		out = append(out, next+uint64(disp))
	}
	return out
}
