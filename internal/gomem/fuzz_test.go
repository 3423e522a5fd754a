package gomem

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The fake image's base address and the offsets of the runtime variables
// in it (memstats is about 10 KB in Go 1.26; a P about 10 KB too).
const (
	fakeBase = 0x100000
	fakeSize = 1 << 17
)

var fakeGlobals = map[string]uint64{
	symAllgs: 0, symAllglen: 0x18, symAllp: 0x20, symGomaxprocs: 0x38, symMbuckets: 0x40,
	symMProfCycle: 0x48, symMemProfileRate: 0x50, symDisableMemProf: 0x58, symSched: 0x100,
	symGCController: 0x2000, symWork: 0x3000, symMemstats: 0x4000, symWaitReasons: 0x8000,
}

// selfLayout is the runtime layout of the Go release running the tests,
// from the generated tables (test binaries are linked without DWARF).
var selfLayout = sync.OnceValues(func() (*Layout, error) { return tableLayout(runtime.Version()) })

// fakeProcess makes a process whose memory is img (repeated to fill the
// fake image) at fakeBase, with the runtime layout of the tests' own Go
// release and no function table.
func fakeProcess(t testing.TB, img []byte) *Process {
	l, err := selfLayout()
	if err != nil {
		t.Fatalf("the test binary's runtime layout: %v", err)
	}
	buf := make([]byte, fakeSize)
	if len(img) > 0 {
		for i := 0; i < len(buf); i += len(img) {
			copy(buf[i:], img)
		}
	}
	g := map[string]uint64{}
	for k, v := range fakeGlobals {
		g[k] = fakeBase + v
	}
	mem := fakeMem{fakeBase: buf}
	return &Process{PID: 1, GoVersion: "go1.26", Layout: l, Located: "fake", globals: g, noBin: true,
		mem: newMem(1, mem.regions(), mem)}
}

// seedImage is a small sound image: allgs holding n goroutine records in
// the image, a bucket list of two buckets, the last one looping to the
// first, and one P holding one 1 ms periodic timer.
func seedImage(t testing.TB, n int) []byte {
	l, err := selfLayout()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, fakeSize)
	put := func(off, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	off := func(field string) uint64 {
		o, ok := l.Off(field)
		if !ok {
			t.Fatalf("%s not in the layout of %s", field, runtime.Version())
		}
		return o
	}
	arr := uint64(0x9000)
	put(0, fakeBase+arr)
	put(8, uint64(n))
	put(16, uint64(n))
	put(0x18, uint64(n))
	gsize, _ := l.Size("runtime.g")
	for i := 0; i < n; i++ {
		g := 0xa000 + uint64(i)*gsize
		put(arr+uint64(i)*8, fakeBase+g)
		binary.LittleEndian.PutUint32(b[g+off("runtime.g.atomicstatus"):], gWaiting)
		lo := off("runtime.g.stack.lo")
		put(g+lo, fakeBase)
		put(g+lo+8, fakeBase+0x1000)
	}
	bk := uint64(0xe000)
	put(0x40, fakeBase+bk)
	nx := off("runtime.bucket.allnext")
	put(bk+nx, fakeBase+bk+0x100)
	put(bk+0x100+nx, fakeBase+bk) // a loop
	for _, at := range []uint64{bk, bk + 0x100} {
		put(at+off("runtime.bucket.typ"), memProfile)
		put(at+off("runtime.bucket.nstk"), 2)
	}
	// allp: one P at 0x10000, its timer heap at 0x1c000 holding one timer
	// at 0x1d000 with a period of 1 ms (Go 1.23 on: a heap of timerWhen,
	// whose first word is the timer's address).
	pp, heap, tm := uint64(0x10000), uint64(0x1c000), uint64(0x1d000)
	put(0x20, fakeBase+0x1e000)
	put(0x28, 1)
	put(0x30, 1)
	put(0x1e000, fakeBase+pp)
	binary.LittleEndian.PutUint32(b[0x38:], 1)
	put(pp+off("runtime.p.timers.heap"), fakeBase+heap)
	put(pp+off("runtime.p.timers.heap")+8, 1)
	put(heap, fakeBase+tm)
	put(tm+off("runtime.timer.period"), uint64(time.Millisecond))
	return b
}

// fuzzSeeds adds the seeds every decoder's fuzz target starts from: no
// memory, the sound image, a truncated one and a self-pointing header.
func fuzzSeeds(f *testing.F) {
	f.Add([]byte{})
	f.Add(seedImage(f, 3))
	f.Add(seedImage(f, 40)[:0x9100])
	f.Add([]byte{0x00, 0x10, 0x10, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
}

// FuzzCensus feeds the goroutine census memory images of any content: it
// returns a census or an error, never panics, and stays within its bounds.
func FuzzCensus(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, img []byte) {
		p := fakeProcess(t, img)
		for _, opts := range []CensusOptions{{}, {Counts: true}} {
			if c, err := p.Census(opts); err == nil {
				if c.Total > maxGoroutines || len(c.Groups) > maxGroups {
					t.Fatalf("census out of bounds: %d goroutines, %d groups", c.Total, len(c.Groups))
				}
			}
		}
	})
}

// FuzzStats feeds the GC, memory, scheduler and timer statistics memory
// images of any content.
func FuzzStats(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, img []byte) {
		p := fakeProcess(t, img)
		for _, read := range []func() (*Stats, error){p.Stats, p.StatsCounts} {
			st, err := read()
			if err != nil {
				continue
			}
			if len(st.TimersPerP) > maxPs || len(st.LocalRunqs) > maxPs || len(st.Periodic) > maxPeriodic {
				t.Fatalf("statistics out of bounds: %d Ps' timers, %d run queues, %d periodic timers",
					len(st.TimersPerP), len(st.LocalRunqs), len(st.Periodic))
			}
			for _, n := range st.LocalRunqs {
				if n < 0 || n > 257 {
					t.Fatalf("a run queue of %d goroutines (a P holds at most 256 and runnext)", n)
				}
			}
		}
	})
}

// FuzzGCClock feeds the GC clock and its ring of cycle ends memory images
// of any content.
func FuzzGCClock(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, img []byte) {
		r, err := fakeProcess(t, img).NewGCClock()
		if err != nil {
			return
		}
		if c, err := r.Read(); err == nil && (c.Start < 0 || c.End < 0 || c.HasCPU && c.Assist > c.GCTotal) {
			t.Fatalf("GC clock out of bounds: %+v", c)
		}
		if ends, err := r.Ends(0, 1<<31); err == nil && len(ends) > gcRing {
			t.Fatalf("%d cycle ends from a ring of %d", len(ends), gcRing)
		}
	})
}

// FuzzHeapProfile feeds the heap profile's bucket walk, its pprof form and
// its top sites memory images of any content.
func FuzzHeapProfile(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, img []byte) {
		p := fakeProcess(t, img)
		h, err := p.HeapProfile()
		if err != nil {
			return
		}
		if len(h.Records) > maxBuckets {
			t.Fatalf("%d heap records", len(h.Records))
		}
		if pp := p.Pprof(h); pp != nil {
			if err := pp.CheckValid(); err != nil {
				t.Fatalf("the heap profile's pprof form is not valid: %v", err)
			}
		}
		p.Sites(h)
	})
}

// TestSeedImage: the sound seed image reads as what it holds.
func TestSeedImage(t *testing.T) {
	p := fakeProcess(t, seedImage(t, 3))
	c, err := p.Census(CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Total != 3 || c.StackBytes != 3*0x1000 {
		t.Errorf("census of the seed: %d goroutines, %d stack bytes; want 3 and %d", c.Total, c.StackBytes, 3*0x1000)
	}
	h, err := p.HeapProfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Records) != 2 || len(h.Notes) == 0 {
		t.Errorf("heap profile of the looping list: %d records, notes %q; want 2 and a note on the loop", len(h.Records), h.Notes)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.TimersPerP) != 1 || st.TimersPerP[0] != 1 || len(st.Periodic) != 1 || st.Periodic[0].Period != time.Millisecond {
		t.Errorf("timers of the seed: per P %v, periodic %+v; want one P holding one 1 ms timer", st.TimersPerP, st.Periodic)
	}
}

// TestStatsHas: a field counts as read only where it was; a variable that
// is not located leaves every field of it unread, with no field named in
// the errors.
func TestStatsHas(t *testing.T) {
	p := fakeProcess(t, seedImage(t, 3))
	delete(p.globals, symGCController)
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Has("runtime.mstats.numgc") || !st.Has("heap statistics") {
		t.Errorf("memstats read, but Has says otherwise: missing %q", st.Missing)
	}
	if st.Has("runtime.gcControllerState.heapMarked") || st.Has("runtime.gcControllerState.gcPercentHeapGoal") {
		t.Errorf("gcController not located, yet its fields count as read")
	}
}
