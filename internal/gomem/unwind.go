package gomem

import (
	"encoding/binary"
	"fmt"
	"sort"
	"time"
)

// unwindAll unwinds up to limit goroutines (spread over the groups) and
// gathers them by stack.
func (p *Process) unwindAll(c *Census, recs []gRec, limit int) {
	per := len(recs)
	if len(recs) > limit && len(c.Groups) > 0 {
		per = max(1, limit/len(c.Groups))
	}
	// Choose the goroutines to unwind, then read the top of each one's
	// stack in batches: most parked stacks fit in the first window.
	taken := make([]int, len(c.Groups))
	type job struct {
		r      *gRec
		sp, pc uint64
	}
	var jobs []job
	for i := range recs {
		r := &recs[i]
		if len(jobs) >= limit || taken[r.group] >= per {
			continue
		}
		sp, pc := r.sp, r.pc
		if r.status == gSyscall {
			sp, pc = r.syscallsp, r.syscallpc
		}
		if r.status == gRunning || sp == 0 || pc == 0 || r.hi <= r.lo || r.hi-r.lo > 1<<30 || sp < r.lo || sp >= r.hi {
			continue
		}
		taken[r.group]++
		jobs = append(jobs, job{r, sp, pc})
	}
	wins := make([]byte, len(jobs)*stackWindow)
	bufs := make([][]byte, len(jobs))
	addrs := make([]uint64, len(jobs))
	ok := make([]bool, len(jobs))
	for i, j := range jobs {
		n := min(uint64(stackWindow), j.r.hi-j.sp)
		bufs[i] = wins[i*stackWindow : i*stackWindow+int(n)]
		addrs[i] = j.sp
	}
	for start := 0; start < len(jobs); start += 1024 {
		end := min(start+1024, len(jobs))
		if start > 0 {
			time.Sleep(pause)
		}
		if err := p.mem.ReadMany(bufs[start:end], addrs[start:end], ok[start:end]); err != nil {
			c.Notes = append(c.Notes, "stacks not unwound: "+err.Error())
			return
		}
	}
	type skey struct {
		state, stack string
		system       bool
	}
	idx := map[skey]int{}
	var (
		pcs []uint64
		key []byte
	)
	for i, j := range jobs {
		if i > 0 && i%1024 == 0 {
			time.Sleep(pause)
		}
		if !ok[i] {
			continue
		}
		r := j.r
		pcs = p.unwind(pcs[:0], j.sp, j.pc, r.lo, r.hi, bufs[i])
		if len(pcs) == 0 {
			continue
		}
		c.Unwound++
		c.Groups[r.group].Unwound++
		state, system := c.Groups[r.group].State, c.Groups[r.group].System
		key = key[:0]
		for _, x := range pcs {
			key = binary.LittleEndian.AppendUint64(key, x)
		}
		k := skey{state, string(key), system}
		si, ok := idx[k]
		if !ok {
			si = len(c.Stacks)
			idx[k] = si
			c.Stacks = append(c.Stacks, StackGroup{State: state, System: system, Frames: p.symbolize(pcs)})
		}
		c.Stacks[si].Count++
	}
	sort.SliceStable(c.Stacks, func(i, j int) bool { return c.Stacks[i].Count > c.Stacks[j].Count })
}

// symbolize expands return addresses into frames, inlined calls included.
func (p *Process) symbolize(pcs []uint64) []Frame {
	bin := p.binary()
	var out []Frame
	for _, pc := range pcs {
		if pc <= p.bias || bin == nil {
			out = append(out, Frame{Func: fmt.Sprintf("%#x", pc)})
			continue
		}
		for _, fr := range bin.Frames(pc - p.bias - 1) {
			out = append(out, Frame{Func: fr.Func, File: fr.File, Line: fr.Line})
		}
	}
	return out
}

// unwind walks a parked goroutine's stack from its saved sp and pc, the
// way the runtime's unwinder does on amd64: each frame's size from the
// function table's pcsp at pc, the return address just above it. top
// holds the stack's bytes from sp on (as far as they were read at once);
// deeper words are read as needed. It stops at runtime.goexit, at a pc
// outside the binary, at the stack's bounds or after maxFrames.
func (p *Process) unwind(dst []uint64, sp, pc, lo, hi uint64, top []byte) []uint64 {
	bin := p.binary()
	if bin == nil || hi <= lo || hi-lo > 1<<30 || sp < lo || sp >= hi {
		return dst
	}
	base := sp
	var win [stackWindow]byte
	winLo, winHi := uint64(0), uint64(0)
	read := func(a uint64) (uint64, bool) {
		if a < base || a+8 > hi {
			return 0, false
		}
		if a+8 <= base+uint64(len(top)) {
			return binary.LittleEndian.Uint64(top[a-base:]), true
		}
		if a < winLo || a+8 > winHi {
			n := min(uint64(stackWindow), hi-a)
			if n < 8 || p.mem.ReadAt(win[:n], a) != nil {
				return 0, false
			}
			winLo, winHi = a, a+n
		}
		return binary.LittleEndian.Uint64(win[a-winLo:]), true
	}
	for len(dst) < maxFrames {
		if pc <= p.bias {
			break
		}
		dst = append(dst, pc)
		d, last, ok := p.frameStep(pc - p.bias - 1)
		if last || !ok {
			break
		}
		fp := sp + uint64(d) + 8
		lr, ok := read(fp - 8)
		if !ok || lr == 0 {
			break
		}
		sp, pc = fp, lr
	}
	return dst
}

// step is what unwinding needs of a pc: the frame size there, and whether
// it is the goroutine's last frame (runtime.goexit).
type step struct {
	delta int32
	last  bool
	ok    bool
}

// frameStep returns, for link-time address v, the frame size and whether
// the frame is runtime.goexit, kept between reads.
func (p *Process) frameStep(v uint64) (int32, bool, bool) {
	bin := p.binary()
	if st, ok := p.steps[v]; ok {
		return st.delta, st.last, st.ok
	}
	var st step
	fr := bin.Frames(v)
	st.last = len(fr) > 0 && fr[len(fr)-1].Func == "runtime.goexit"
	if d, ok := bin.SPDelta(v); ok && d >= 0 {
		st.delta, st.ok = d, true
	}
	if p.steps == nil || len(p.steps) >= maxFrameCache {
		p.steps = map[uint64]step{}
	}
	p.steps[v] = st
	return st.delta, st.last, st.ok
}
