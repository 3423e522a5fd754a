package stacks

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// kernelSyms is /proc/kallsyms: kernel and module text symbols sorted by
// address.
type kernelSyms struct {
	syms []elfSym
	// zero is true when every address read as 0: the kernel hides them
	// (kptr_restrict, or not root).
	zero bool
	err  error
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
		f, err := os.Open(proc.NewFS("").Path("kallsyms"))
		if err != nil {
			kallsymsCache.k = &kernelSyms{err: fmt.Errorf("read kernel symbols: %w", err)}
		} else {
			kallsymsCache.k = parseKallsyms(f)
			f.Close()
		}
	}
	return kallsymsCache.k
}

// parseKallsyms parses lines "ffffffff81000000 T _stext [module]", keeping
// text symbols (t, T, w, W).
func parseKallsyms(r io.Reader) *kernelSyms {
	k := &kernelSyms{zero: true}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) < 3 || len(f[1]) != 1 {
			continue
		}
		switch f[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		addr, err := strconv.ParseUint(string(f[0]), 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			k.zero = false
		}
		k.syms = append(k.syms, elfSym{addr: addr, name: string(f[2])})
	}
	if err := sc.Err(); err != nil {
		k.err = fmt.Errorf("read kernel symbols: %w", err)
	}
	sort.SliceStable(k.syms, func(i, j int) bool { return k.syms[i].addr < k.syms[j].addr })
	return k
}

// lookup returns the symbol containing addr (the closest one below it).
func (k *kernelSyms) lookup(addr uint64) (string, bool) {
	if k.zero || len(k.syms) == 0 {
		return "", false
	}
	i := sort.Search(len(k.syms), func(i int) bool { return k.syms[i].addr > addr }) - 1
	if i < 0 {
		return "", false
	}
	return k.syms[i].name, true
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
