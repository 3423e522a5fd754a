package gomem

import (
	"slices"
	"time"
)

// Bounds of the runs readGs reads at once: records closer than runGap
// bytes share a run, a run is at most runMax bytes, and one system call
// reads at most readBuf bytes.
const (
	runGap  = 4096
	runMax  = 1 << 20
	readBuf = 2 << 20
	// pause is the rest between two reads of readBuf bytes: a large
	// census is paced so that no burst of it holds a CPU longer than about
	// a millisecond, which a target sharing the CPUs would feel as
	// latency (a 200,000-goroutine census is about 50 reads).
	pause = time.Millisecond
)

// readGs reads the records of size bytes at ptrs and calls fn with each
// one read. The runtime allocates goroutine records from spans of one
// size class, so they lie packed: records are read in runs of neighbours,
// one remote range per run, which costs the kernel one page walk per run
// instead of one per goroutine (and takes the target's mmap lock as
// rarely). A run that is not readable as a whole is read record by
// record. It returns how many records could not be read.
func (p *Process) readGs(ptrs []uint64, size uint64, fn func([]byte)) (int, error) {
	sorted := slices.Clone(ptrs)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	type run struct {
		lo, hi      uint64
		first, last int // indexes into sorted, last excluded
	}
	var runs []run
	for i, a := range sorted {
		if a == 0 || a+size < a {
			continue
		}
		if n := len(runs); n > 0 && a <= runs[n-1].hi+runGap && a+size-runs[n-1].lo <= runMax {
			runs[n-1].hi = max(runs[n-1].hi, a+size)
			runs[n-1].last = i + 1
			continue
		}
		runs = append(runs, run{lo: a, hi: a + size, first: i, last: i + 1})
	}
	total := uint64(0)
	for _, r := range runs {
		total += r.hi - r.lo
	}
	buf := make([]byte, min(total, readBuf))
	var (
		bufs  [][]byte
		addrs []uint64
		ok    []bool
		batch []run
	)
	unreadable := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ok = ok[:0]
		for range batch {
			ok = append(ok, false)
		}
		if err := p.mem.ReadMany(bufs, addrs, ok); err != nil {
			return err
		}
		for j, r := range batch {
			if !ok[j] {
				n, err := p.readGsOneByOne(sorted[r.first:r.last], size, fn)
				unreadable += n
				if err != nil {
					return err
				}
				continue
			}
			for _, a := range sorted[r.first:r.last] {
				fn(bufs[j][a-r.lo : a-r.lo+size])
			}
		}
		bufs, addrs, batch = bufs[:0], addrs[:0], batch[:0]
		return nil
	}
	used := uint64(0)
	for _, r := range runs {
		n := r.hi - r.lo
		if used+n > readBuf || len(batch) == 1024 {
			if err := flush(); err != nil {
				return unreadable, err
			}
			used = 0
			time.Sleep(pause)
		}
		bufs = append(bufs, buf[used:used+n])
		addrs = append(addrs, r.lo)
		batch = append(batch, r)
		used += n
	}
	return unreadable, flush()
}

// readGsOneByOne reads records one iovec each.
func (p *Process) readGsOneByOne(ptrs []uint64, size uint64, fn func([]byte)) (int, error) {
	const batch = 256
	back := make([]byte, batch*size)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = back[uint64(i)*size : uint64(i+1)*size]
	}
	ok := make([]bool, batch)
	unreadable := 0
	for start := 0; start < len(ptrs); start += batch {
		chunk := ptrs[start:min(start+batch, len(ptrs))]
		if err := p.mem.ReadMany(bufs[:len(chunk)], chunk, ok[:len(chunk)]); err != nil {
			return unreadable, err
		}
		for i := range chunk {
			if ok[i] {
				fn(bufs[i])
			} else {
				unreadable++
			}
		}
	}
	return unreadable, nil
}
