package gomem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// GCClock is the runtime's GC clock at one instant: how many cycles have
// completed, when the last one started and ended, and the GC's cumulative
// CPU. It is read in one system call (GCClockReader.Read), cheap enough to
// poll every few milliseconds, and it writes nothing to the target.
type GCClock struct {
	// Now is CLOCK_MONOTONIC in nanoseconds (the clock of the runtime's
	// nanotime, so of Start and End) just after the read.
	Now int64
	// Cycles counts completed cycles (memstats.numgc), Started the cycles
	// begun (work.cycles).
	Cycles, Started uint32
	// Start is the nanotime at which the latest cycle began (sweep
	// termination, work.tSweepTerm), End the nanotime at which the latest
	// completed cycle's mark termination ended (work.tEnd). Start > End
	// while a cycle is under way; 0 before the first cycle.
	Start, End int64
	// Assist and GCTotal are the CPU time of mark assists and of the whole
	// GC, cumulative as of the last completed cycle (the runtime adds a
	// cycle's at its end); HasCPU says whether the release's layout has
	// them and they were read.
	Assist, GCTotal time.Duration
	HasCPU          bool
}

// InCycle reports whether a cycle had started and not ended at the read.
func (c GCClock) InCycle() bool { return c.Start > c.End }

// GCCycleEnd is one completed cycle from the runtime's ring of the last
// 256 (memstats.pause_end and pause_ns).
type GCCycleEnd struct {
	// N is the cycle's number: the count of completed cycles before it.
	N uint32
	// End is the wall-clock time its mark termination ended.
	End time.Time
	// Pause is the cycle's total stop-the-world pause.
	Pause time.Duration
}

// gcRing is the length of the runtime's pause_ns and pause_end arrays.
const gcRing = 256

// GCClockReader reads a process's GC clock. Addresses and offsets are
// resolved once, so each Read is one process_vm_readv of a few fixed
// fields. It is not safe for concurrent use; a Process used elsewhere at
// the same time needs a reader on a Process of its own.
type GCClockReader struct {
	p *Process
	// The fields of one read, in the order the buffers are filled.
	numgc, cycles, times, cpu uint64 // addresses
	cpuOffs                   [2]uint64
	cpuLen                    uint64
	pauseNS, pauseEnd         uint64
	bufs                      [][]byte
	addrs                     []uint64
	ok                        []bool
}

// ErrNoGCClock reports a release or binary whose GC clock fields are not
// known: the cycle count, work.cycles or the cycle's start and end times.
var ErrNoGCClock = errors.New("no GC clock")

// NewGCClock prepares reads of p's GC clock. It fails with ErrNoGCClock
// where the runtime's variables were not located or the layout lacks the
// fields; the GC's CPU (Assist, GCTotal) is optional.
func (p *Process) NewGCClock() (*GCClockReader, error) {
	ms, err1 := p.addr(symMemstats)
	work, err2 := p.addr(symWork)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoGCClock, err)
	}
	r := &GCClockReader{p: p}
	var missing []string
	off := func(path string) uint64 {
		o, ok := p.Layout.Off(path)
		if !ok {
			missing = append(missing, path)
		}
		return o
	}
	r.numgc = ms + off("runtime.mstats.numgc")
	r.pauseNS = ms + off("runtime.mstats.pause_ns")
	r.pauseEnd = ms + off("runtime.mstats.pause_end")
	r.cycles = work + off("runtime.workType.cycles")
	ts, te := off("runtime.workType.tSweepTerm"), off("runtime.workType.tEnd")
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s lacks %v", ErrNoGCClock, p.GoVersion, missing)
	}
	// The runtime declares the four phase times together: start, mark,
	// mark termination, end.
	if te != ts+24 {
		return nil, fmt.Errorf("%w: work.tSweepTerm at %d and work.tEnd at %d are not the four phase times in a row", ErrNoGCClock, ts, te)
	}
	r.times = work + ts
	r.bufs = [][]byte{make([]byte, 4), make([]byte, 4), make([]byte, 32)}
	r.addrs = []uint64{r.numgc, r.cycles, r.times}
	// The GC's CPU: two fields of work.cpuStats, read as the span
	// between them.
	co, okc := p.Layout.Off("runtime.workType.cpuStats")
	ao, oka := p.Layout.Off("runtime.cpuStats.GCAssistTime")
	to, okt := p.Layout.Off("runtime.cpuStats.GCTotalTime")
	if okc && oka && okt {
		lo, hi := min(ao, to), max(ao, to)
		if hi-lo <= 256 {
			r.cpu = work + co + lo
			r.cpuOffs = [2]uint64{ao - lo, to - lo}
			r.cpuLen = hi - lo + 8
			r.bufs = append(r.bufs, make([]byte, r.cpuLen))
			r.addrs = append(r.addrs, r.cpu)
		}
	}
	r.ok = make([]bool, len(r.bufs))
	return r, nil
}

// HasCPU reports whether reads carry the GC's CPU (Go 1.23 on names the
// fields the reader knows).
func (r *GCClockReader) HasCPU() bool { return r.cpuLen > 0 }

// Read reads the clock: one system call. A field the kernel could not
// read fails the whole reading.
func (r *GCClockReader) Read() (GCClock, error) {
	m := r.p.mem
	m.setBudget(1 << 10)
	defer m.setBudget(0)
	if err := m.ReadMany(r.bufs, r.addrs, r.ok); err != nil {
		return GCClock{}, fmt.Errorf("read the GC clock: %w", err)
	}
	c := GCClock{Now: monotonicNow()}
	for i, ok := range r.ok {
		if !ok {
			return GCClock{}, fmt.Errorf("read the GC clock: %d bytes at %#x: %w", len(r.bufs[i]), r.addrs[i], ErrBadAddress)
		}
	}
	le := binary.LittleEndian
	c.Cycles = le.Uint32(r.bufs[0])
	c.Started = le.Uint32(r.bufs[1])
	c.Start = int64(le.Uint64(r.bufs[2]))
	c.End = int64(le.Uint64(r.bufs[2][24:]))
	if c.Start < 0 || c.End < 0 {
		return GCClock{}, fmt.Errorf("read the GC clock: cycle times %d and %d: not a nanotime", c.Start, c.End)
	}
	if r.cpuLen > 0 {
		b := r.bufs[3]
		a, tot := int64(le.Uint64(b[r.cpuOffs[0]:])), int64(le.Uint64(b[r.cpuOffs[1]:]))
		if a >= 0 && tot >= a {
			c.Assist, c.GCTotal, c.HasCPU = time.Duration(a), time.Duration(tot), true
		}
	}
	return c, nil
}

// Ends reads the end time and pause of the completed cycles numbered
// from to to-1 (to is a GCClock's Cycles) from the runtime's ring, which
// holds the last 256: older cycles are not returned. Entries the runtime
// has not yet written, or overwritten since to was read, are left out
// (their end time is zero or after a later cycle's).
func (r *GCClockReader) Ends(from, to uint32) ([]GCCycleEnd, error) {
	if to == from {
		return nil, nil
	}
	if from > to || to-from > gcRing {
		from = to - min(to, gcRing)
	}
	n := int(to - from)
	ns := make([]byte, 8*gcRing)
	end := make([]byte, 8*gcRing)
	m := r.p.mem
	m.setBudget(16 << 10)
	defer m.setBudget(0)
	ok := make([]bool, 2)
	if err := m.ReadMany([][]byte{ns, end}, []uint64{r.pauseNS, r.pauseEnd}, ok); err != nil {
		return nil, fmt.Errorf("read the GC pause ring: %w", err)
	}
	if !ok[0] || !ok[1] {
		return nil, fmt.Errorf("read the GC pause ring: %w", ErrBadAddress)
	}
	out := make([]GCCycleEnd, 0, n)
	var last int64
	for i := range n {
		k := from + uint32(i)
		j := int(k % gcRing)
		e := int64(binary.LittleEndian.Uint64(end[8*j:]))
		pause := int64(binary.LittleEndian.Uint64(ns[8*j:]))
		// A slot not yet written, or written again for a newer cycle
		// than to (the ring moved on since): its time is out of order.
		if e <= 0 || e < last || pause < 0 {
			continue
		}
		last = e
		out = append(out, GCCycleEnd{N: k, End: time.Unix(0, e), Pause: time.Duration(pause)})
	}
	return out, nil
}

// MonotonicNow reads CLOCK_MONOTONIC in nanoseconds, the clock of the
// runtime's nanotime and so of GCClock's Start and End (0 where the clock
// is not readable).
func MonotonicNow() int64 { return monotonicNow() }
