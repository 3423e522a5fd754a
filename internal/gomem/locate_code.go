package gomem

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

// A stripped Go binary (linked with -s) has no symbol table, but its
// function table still names every function. Each runtime variable the
// reader uses is found through a small runtime function, present in every
// Go program (the scheduler, the GC or the allocator calls it), that
// loads, compares or takes the address of the variable with a RIP-relative
// operand. The operand is picked by the kind of instruction, its width,
// the section the address falls in (where the linker puts a variable of
// that type: .bss holds variables with pointers, .noptrbss those without,
// .noptrdata initialised ones without pointers) and its order; where the
// function reads a field, the field's offset from the layout gives the
// variable's start. The patterns were read from the code of Go 1.20 to
// 1.27 (linux/amd64: plain, PIE, cgo, -race, GOAMD64=v3 and
// -gcflags=all=-l builds); locate_code_test.go checks them against the
// symbol table of such builds.

// codeRef is one RIP-relative memory operand in a function's code.
type codeRef struct {
	op    x86asm.Op
	addr  uint64 // the link-time address the operand names
	width int    // bytes the instruction reads or writes there (0 for LEA)
	store bool   // the operand is the destination (a store, or a CMP's left side)
	imm   bool   // the instruction has an immediate operand too
	sect  string // the section holding addr
}

// maxFuncCode bounds the bytes of one function decoded.
const maxFuncCode = 16 << 10

// ripRefs decodes code (x86-64, starting at link-time address pc) one
// instruction after another and returns its RIP-relative memory operands
// in order. A byte that does not decode is stepped over: a Go function
// holds only code, so that happens only in a damaged or crafted file.
func ripRefs(code []byte, pc uint64, section func(uint64) string) []codeRef {
	var out []codeRef
	for i := 0; i < len(code); {
		inst, err := x86asm.Decode(code[i:], 64)
		if err != nil || inst.Len <= 0 {
			i++
			continue
		}
		next := pc + uint64(i) + uint64(inst.Len)
		i += inst.Len
		var r codeRef
		found, imm := false, false
		for k, a := range inst.Args {
			switch a := a.(type) {
			case nil:
			case x86asm.Mem:
				if a.Base != x86asm.RIP || a.Index != 0 {
					continue
				}
				r = codeRef{op: inst.Op, addr: next + uint64(a.Disp), width: inst.MemBytes, store: k == 0}
				found = true
			case x86asm.Imm:
				imm = true
			}
		}
		if !found {
			continue
		}
		r.imm = imm
		if inst.Op == x86asm.LEA {
			r.width = 0
		}
		r.sect = section(r.addr)
		out = append(out, r)
	}
	return out
}

// codeRule finds one variable in the RIP-relative operands of fn.
type codeRule struct {
	name string // the variable
	fn   string // the runtime function whose code names it
	// alt is a function tried when fn's code shows nothing: the helper fn
	// calls where the build did not inline it (-gcflags=all=-l).
	alt string
	// field is the field of the variable the operand names, "" for its
	// start; its offset is read from the layout.
	field string
	// align is the variable's alignment (8 unless said).
	align uint64
	pick  func(refs []codeRef, found map[string]uint64) (uint64, bool)
}

// first returns the first operand that ok accepts, and the index after it.
func first(refs []codeRef, ok func(codeRef) bool) (codeRef, int, bool) {
	for i, r := range refs {
		if ok(r) {
			return r, i + 1, true
		}
	}
	return codeRef{}, 0, false
}

// load accepts a read of width bytes (a MOV or MOVSXD into a register) in
// section sect.
func load(width int, sect string) func(codeRef) bool {
	return func(r codeRef) bool {
		return (r.op == x86asm.MOV || r.op == x86asm.MOVSXD) && !r.store && r.width == width && r.sect == sect
	}
}

// atomicLoad accepts a read of width bytes in sect, or the taking of an
// address there: an atomic type's Load method, inlined, reads the
// variable; not inlined, it is passed its address.
func atomicLoad(width int, sect string) func(codeRef) bool {
	return func(r codeRef) bool { return load(width, sect)(r) || lea(sect)(r) }
}

// lea accepts the taking of an address in section sect.
func lea(sect string) func(codeRef) bool {
	return func(r codeRef) bool { return r.op == x86asm.LEA && r.sect == sect }
}

// sliceLoad picks the first 8-byte load in sect followed by a load of the
// word after it: a slice's array and length, as `range s` reads them.
func sliceLoad(sect string) func([]codeRef, map[string]uint64) (uint64, bool) {
	return func(refs []codeRef, _ map[string]uint64) (uint64, bool) {
		r, next, ok := first(refs, load(8, sect))
		if !ok {
			return 0, false
		}
		_, _, ok = first(refs[next:], func(s codeRef) bool { return load(8, sect)(s) && s.addr == r.addr+8 })
		return r.addr, ok
	}
}

// firstOf picks the first operand ok accepts.
func firstOf(ok func(codeRef) bool) func([]codeRef, map[string]uint64) (uint64, bool) {
	return func(refs []codeRef, _ map[string]uint64) (uint64, bool) {
		r, _, found := first(refs, ok)
		return r.addr, found
	}
}

// codeRules are applied in order: a rule may use what an earlier one found.
var codeRules = []codeRule{
	// forEachG: lock(&allglock); for _, gp := range allgs {...}.
	{name: symAllgs, fn: "runtime.forEachG", pick: sliceLoad(".bss")},
	// forEachGRace: ptr, length := atomicAllG(), which loads allglen
	// (a uintptr) and then allgptr.
	{name: symAllglen, fn: "runtime.forEachGRace", alt: "runtime.atomicAllG", pick: firstOf(load(8, ".noptrbss"))},
	// preemptall: for _, pp := range allp {...}.
	{name: symAllp, fn: "runtime.preemptall", pick: sliceLoad(".bss")},
	// gcBgMarkStartWorkers: for gcBgMarkWorkerCount < gomaxprocs (a CMP of
	// the int32 with a register).
	{name: symGomaxprocs, fn: "runtime.gcBgMarkStartWorkers", align: 4, pick: firstOf(func(r codeRef) bool {
		return r.op == x86asm.CMP && r.width == 4 && r.sect == ".noptrbss"
	})},
	// goschedIfBusy: sched.npidle.Load() > 0.
	{name: symSched, fn: "runtime.goschedIfBusy", field: "runtime.schedt.npidle", pick: firstOf(atomicLoad(4, ".bss"))},
	// newBucket: persistentalloc(size, 0, &memstats.buckhash_sys).
	{name: symMemstats, fn: "runtime.newBucket", field: "runtime.mstats.buckhash_sys", pick: firstOf(lea(".noptrbss"))},
	// gcinit: gcController.init(readGOGC(), readGOMEMLIMIT()), after
	// sweep.active.state (in .bss) is taken.
	{name: symGCController, fn: "runtime.gcinit", pick: firstOf(lea(".noptrbss"))},
	// putfull: work.full.push(&b.node).
	{name: symWork, fn: "runtime.putfull", field: "runtime.workType.full", pick: firstOf(lea(".bss"))},
	// mProf_FlushLocked: for b := mbuckets.Load(); b != nil; ... (a plain
	// pointer load in every release).
	{name: symMbuckets, fn: "runtime.mProf_FlushLocked", pick: firstOf(atomicLoad(8, ".bss"))},
	// mProf_Free: cycle := mProfCycle.read() (the holder's first field).
	{name: symMProfCycle, fn: "runtime.mProf_Free", align: 4, pick: firstOf(atomicLoad(4, ".noptrbss"))},
	// allocmcache: c.nextSample = nextSample(), which reads MemProfileRate
	// (initialised: .noptrdata).
	{name: symMemProfileRate, fn: "runtime.allocmcache", alt: "runtime.nextSample", pick: firstOf(load(8, ".noptrdata"))},
	// (*mheap).initSpan: s.elemsize = uintptr(class_to_size[sizeclass]),
	// the array's address taken (Go 1.25 on, the array is
	// internal/runtime/gc.SizeClassToSize), before class_to_divmagic's.
	{name: symClassToSize, fn: "runtime.(*mheap).initSpan", align: 2, pick: firstOf(lea(".noptrdata"))},
	// schedinit: if disableMemoryProfiling { MemProfileRate = 0 }: the
	// byte compare just before the store of 0 to MemProfileRate.
	{name: symDisableMemProf, fn: "runtime.schedinit", align: 1, pick: func(refs []codeRef, found map[string]uint64) (uint64, bool) {
		rate, ok := found[symMemProfileRate]
		if !ok {
			return 0, false
		}
		for i, r := range refs {
			if r.op != x86asm.MOV || !r.store || !r.imm || r.addr != rate || i == 0 {
				continue
			}
			c := refs[i-1]
			// Where the linker sets the bool it puts it in .noptrdata
			// (Go 1.24 on) or at the start of .data (before); where it
			// leaves it false (the program references the heap
			// profile), the bool is zero and lies in .noptrbss.
			if c.op == x86asm.CMP && c.width == 1 && c.imm && (c.sect == ".noptrdata" || c.sect == ".data" || c.sect == ".noptrbss" || c.sect == ".bss") {
				return c.addr, true
			}
		}
		return 0, false
	}},
}

// globalsFromCode finds the runtime variables of a stripped binary through
// the code of runtime functions that reference them (see codeRules). A
// variable whose function or pattern is not found is absent from the map
// with the reason in the error, which is nil when every rule matched; the
// map is nil only when nothing could be read (not amd64, not Go).
func globalsFromCode(im *stacks.Image, l *Layout) (map[string]uint64, error) {
	if im.Machine() != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s executable without a symbol table: runtime variables are found from code on amd64 only", im.Machine())
	}
	if l == nil {
		return nil, errors.New("runtime variables from code: no layout")
	}
	found := map[string]uint64{}
	var missed []string
	funcs := map[string][]codeRef{}
	var notGo error
	refsOf := func(fn string) ([]codeRef, error) {
		if refs, ok := funcs[fn]; ok {
			return refs, nil
		}
		entry, code, err := im.Func(fn, maxFuncCode)
		if err != nil {
			if errors.Is(err, stacks.ErrNotGo) {
				notGo = err
			}
			return nil, err
		}
		refs := ripRefs(code, entry, im.SectionAt)
		funcs[fn] = refs
		return refs, nil
	}
	for _, rule := range codeRules {
		var addr uint64
		ok := false
		var why []string
		for _, fn := range []string{rule.fn, rule.alt} {
			if fn == "" {
				continue
			}
			refs, err := refsOf(fn)
			if notGo != nil {
				return nil, fmt.Errorf("runtime variables from code: %w", notGo)
			}
			if err != nil {
				why = append(why, err.Error())
				continue
			}
			if addr, ok = rule.pick(refs, found); ok {
				break
			}
			why = append(why, "no reference recognized in "+fn)
		}
		if !ok {
			missed = append(missed, fmt.Sprintf("%s: %s", rule.name, strings.Join(why, ", ")))
			continue
		}
		if rule.field != "" {
			off, ok := l.Off(rule.field)
			if !ok || off > addr {
				missed = append(missed, fmt.Sprintf("%s: offset of %s unknown in %s", rule.name, rule.field, l.Go))
				continue
			}
			addr -= off
		}
		align := rule.align
		if align == 0 {
			align = 8
		}
		if addr%align != 0 || im.SectionAt(addr) == "" {
			missed = append(missed, fmt.Sprintf("%s: the code names %#x, not a variable's address", rule.name, addr))
			continue
		}
		found[rule.name] = addr
	}
	if len(missed) > 0 {
		return found, fmt.Errorf("runtime variables from code: %s", strings.Join(missed, "; "))
	}
	return found, nil
}
