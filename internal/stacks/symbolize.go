package stacks

import (
	"fmt"
	"strings"
)

// SymFrame is one frame of a symbolized stack.
type SymFrame struct {
	Frame
	// Kernel is true for kernel frames.
	Kernel bool
	// Addr is the sampled address and Map the index in Profile.Mappings of
	// the mapping it fell in (-1: none).
	Addr uint64
	Map  int
	// Unknown is true when no symbol covered the address; Func is then
	// "binary+0xoffset" or the bare address.
	Unknown bool
}

// SymStack is one Stack with its frames, leaf first, and its runtime class.
type SymStack struct {
	*Stack
	Frames []SymFrame
	Class  Class
}

// Mapping is an executable mapping of the target (Mappings[0] is the
// executable; a kernel mapping comes last when there are kernel frames).
type Mapping struct {
	Start, Limit, Offset uint64
	File, BuildID        string
	Kernel               bool
}

// Profile is a symbolized, classified profile.
type Profile struct {
	*Raw
	Stacks   []SymStack
	Mappings []Mapping
	// GoFrames counts user frames in Go code and GoUnknown those of them
	// the pclntab did not cover (should be 0).
	GoFrames, GoUnknown int
	// Frames and UnknownFrames count all frames.
	Frames, UnknownFrames int
	// OffCPU are the off-CPU stacks kept (see Raw.OffCPU);
	// OffCPUFiltered is the off-CPU time of idle runtime threads left out.
	OffCPU         []SymStack
	OffCPUFiltered int64
	// Truncated counts samples whose user stack was cut at an address in
	// no executable mapping (a frame-pointer walk through code without
	// frame pointers).
	Truncated int64
}

// KernelTimeNotSampled is the name of the synthetic leaf of a user-only
// profile.
const KernelTimeNotSampled = "[kernel time, not sampled]"

// Symbolize names every address of raw: Go code from pclntab (with inlined
// frames), other code from ELF symbols, the kernel through BPF or from
// /proc/kallsyms (kernelNames).
func Symbolize(raw *Raw) *Profile {
	p := &Profile{Raw: raw}
	kernNames, why := kernelNames(raw)
	if why != "" {
		raw.Notes = append(raw.Notes, why)
	}
	// Mappings: the executable's first, the kernel's last.
	mapIndex := map[int]int{}
	addMap := func(i int, m *mapping) {
		if _, ok := mapIndex[i]; ok {
			return
		}
		mm := Mapping{Start: m.start, Limit: m.end, Offset: m.off, File: m.path}
		if m.obj != nil {
			mm.BuildID = strings.TrimPrefix(m.obj.buildID, "go:")
		}
		mapIndex[i] = len(p.Mappings)
		p.Mappings = append(p.Mappings, mm)
	}
	for i := range raw.maps {
		if raw.maps[i].path == raw.Exe && raw.Exe != "" {
			addMap(i, &raw.maps[i])
		}
	}
	kernelMap := -1
	type key struct {
		addr  uint64
		exact bool
	}
	userCache := map[key][]SymFrame{}
	kernCache := map[uint64]SymFrame{}
	symbolizeStack := func(st *Stack) SymStack {
		ss := SymStack{Stack: st}
		if st.Synthetic {
			ss.Frames = []SymFrame{{Frame: Frame{Func: KernelTimeNotSampled}, Kernel: true, Map: -1}}
		}
		for _, a := range st.Kernel {
			f, ok := kernCache[a]
			if !ok {
				f = SymFrame{Kernel: true, Addr: a, Map: -1}
				if name := kernNames[a]; name != "" {
					f.Func = name
				} else {
					f.Func, f.Unknown = fmt.Sprintf("[kernel] %#x", a), true
				}
				kernCache[a] = f
			}
			if kernelMap < 0 {
				kernelMap = -2 // assigned after the user mappings
			}
			ss.Frames = append(ss.Frames, f)
		}
		for i, a := range st.User {
			if i > 0 && findMapping(raw.maps, a) == nil {
				// Frame-pointer walks through code built without frame
				// pointers end in garbage: stop at the first address
				// outside every executable mapping.
				p.Truncated += st.Count
				break
			}
			k := key{a, i == 0}
			fs, ok := userCache[k]
			if !ok {
				fs = symbolizeUser(raw, a, i == 0, addMap, mapIndex)
				userCache[k] = fs
			}
			ss.Frames = append(ss.Frames, fs...)
		}
		for _, f := range ss.Frames {
			p.Frames++
			if f.Unknown {
				p.UnknownFrames++
			}
			if !f.Kernel && f.Map >= 0 && f.Map < len(raw.maps) && raw.maps[f.Map].obj != nil && raw.maps[f.Map].obj.isGo() {
				p.GoFrames++
				if f.Unknown {
					p.GoUnknown++
				}
			}
		}
		ss.Class = classify(ss.Frames, st.Mode)
		return ss
	}
	for _, st := range raw.Stacks {
		p.Stacks = append(p.Stacks, symbolizeStack(st))
	}
	for _, st := range raw.OffCPU {
		ss := symbolizeStack(st)
		if !raw.OffCPUAll && idleOffCPU[ss.Class] {
			p.OffCPUFiltered += st.OffNS
			continue
		}
		p.OffCPU = append(p.OffCPU, ss)
	}
	// Translate raw map indexes to Mappings indexes.
	if kernelMap == -2 {
		kernelMap = len(p.Mappings)
		p.Mappings = append(p.Mappings, Mapping{File: "[kernel.kallsyms]", Kernel: true, Limit: ^uint64(0)})
	}
	all := append(append([]SymStack(nil), p.Stacks...), p.OffCPU...)
	for i := range all {
		fr := all[i].Frames
		for j := range fr {
			switch {
			case fr[j].Kernel && fr[j].Addr != 0:
				fr[j].Map = kernelMap
			case fr[j].Map >= 0:
				fr[j].Map = mapIndex[fr[j].Map]
			}
		}
	}
	return p
}

// symbolizeUser returns the frames at user address a (inlined ones first).
// Map in the returned frames is the index in raw.maps.
func symbolizeUser(raw *Raw, a uint64, exact bool, addMap func(int, *mapping), mapIndex map[int]int) []SymFrame {
	mi := -1
	m := findMapping(raw.maps, a)
	if m != nil {
		mi = indexOf(raw.maps, m)
		addMap(mi, m)
	}
	look := a
	if !exact && look > 0 {
		look-- // a return address: the call is the instruction before it
	}
	if m != nil && m.obj != nil {
		if va, ok := m.obj.vaddr(look - m.start + m.off); ok {
			if fs, ok := m.obj.symbolize(va, nil); ok {
				out := make([]SymFrame, len(fs))
				for i, f := range fs {
					out[i] = SymFrame{Frame: f, Addr: a, Map: mi}
				}
				return out
			}
		}
	}
	name := fmt.Sprintf("%#x", a)
	if m != nil {
		base := m.path
		if i := strings.LastIndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		name = fmt.Sprintf("%s+%#x", base, a-m.start+m.off)
	}
	return []SymFrame{{Frame: Frame{Func: name}, Addr: a, Map: mi, Unknown: true}}
}

func indexOf(ms []mapping, m *mapping) int {
	for i := range ms {
		if &ms[i] == m {
			return i
		}
	}
	return -1
}

// idleOffCPU are the classes of off-CPU stacks that are Go runtime threads
// waiting for work: most of a Go program's thread-level off-CPU time, and
// not where goroutines wait (that happens in user space). Left out unless
// Options.OffCPUAll.
var idleOffCPU = map[Class]bool{ClassIdle: true, ClassSysmon: true, ClassScheduler: true, ClassNetpoll: true}

// kernelNames names every distinct kernel address of raw's stacks ("" for
// an address without a name): through the kernel's own lookup where BPF is
// allowed (bpfKernelNames: microseconds for a profile's few hundred
// addresses), else from /proc/kallsyms, read only when some stack has a
// kernel frame. why says why kernel frames stay addresses, or is "".
func kernelNames(raw *Raw) (names map[uint64]string, why string) {
	names = map[uint64]string{}
	var addrs []uint64
	for _, list := range [][]*Stack{raw.Stacks, raw.OffCPU} {
		for _, st := range list {
			for _, a := range st.Kernel {
				if _, ok := names[a]; !ok {
					names[a] = ""
					addrs = append(addrs, a)
				}
			}
		}
	}
	if len(addrs) == 0 {
		return names, ""
	}
	if got, err := bpfKernelNames(addrs); err == nil {
		for i, a := range addrs {
			names[a] = got[i]
		}
		return names, ""
	}
	ks := loadKallsyms()
	if ok, why := ks.usable(); !ok {
		return names, why
	}
	for _, a := range addrs {
		names[a], _ = ks.lookup(a)
	}
	return names, ""
}
