package gomem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// ErrBadAddress reports an address outside the target's readable mappings,
// or a read the kernel refused (the mapping went away, the process exited).
var ErrBadAddress = errors.New("address not readable in the target")

// region is one readable mapping of the target.
type region struct{ lo, hi uint64 }

// Mem reads a target's memory at checked addresses. It is not safe for
// concurrent use.
type Mem struct {
	pid     int
	regions []region // sorted, readable
	raw     rawReader
	// reload reads the mappings again: the heap grows into new mappings
	// after the process was opened. It is called at most once per
	// snapshot, on the first address outside the known regions.
	reload   func() ([]region, error)
	reloaded bool
	// Budget bounds the bytes one snapshot may read; 0 is unbounded.
	budget, used uint64
}

// rawReader reads n bytes at addr from the target into each buffer; the
// Linux one is process_vm_readv. It reports how many of the iovecs were
// filled completely.
type rawReader interface {
	readv(bufs [][]byte, addrs []uint64) (int, error)
}

// newMem returns a reader of the regions given (unsorted, any overlap).
func newMem(pid int, regions []region, raw rawReader) *Mem {
	rs := append([]region(nil), regions...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	return &Mem{pid: pid, regions: rs, raw: raw}
}

// setBudget starts a snapshot that may read at most n bytes (0: no bound).
func (m *Mem) setBudget(n uint64) { m.budget, m.used, m.reloaded = n, 0, false }

// Readable reports whether [addr, addr+n) lies in one readable mapping,
// reading the mappings again once per snapshot where it does not.
func (m *Mem) Readable(addr, n uint64) bool {
	if n == 0 || addr+n < addr {
		return false
	}
	if m.inRegions(addr, n) {
		return true
	}
	if m.reload == nil || m.reloaded {
		return false
	}
	m.reloaded = true
	rs, err := m.reload()
	if err != nil {
		return false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	m.regions = rs
	return m.inRegions(addr, n)
}

func (m *Mem) inRegions(addr, n uint64) bool {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].hi > addr })
	return i < len(m.regions) && m.regions[i].lo <= addr && addr+n <= m.regions[i].hi
}

// ReadAt fills b from the target's address addr.
func (m *Mem) ReadAt(b []byte, addr uint64) error {
	if len(b) == 0 {
		return nil
	}
	if !m.Readable(addr, uint64(len(b))) {
		return fmt.Errorf("read %d bytes at %#x: %w", len(b), addr, ErrBadAddress)
	}
	if err := m.charge(uint64(len(b))); err != nil {
		return err
	}
	n, err := m.raw.readv([][]byte{b}, []uint64{addr})
	if err != nil {
		return fmt.Errorf("read %d bytes at %#x: %w", len(b), addr, err)
	}
	if n != 1 {
		return fmt.Errorf("read %d bytes at %#x: %w", len(b), addr, ErrBadAddress)
	}
	return nil
}

// ReadMany fills bufs[i] from addrs[i] in as few system calls as the kernel
// allows. ok[i] says whether bufs[i] was read; an address that is not
// readable is skipped, not an error.
func (m *Mem) ReadMany(bufs [][]byte, addrs []uint64, ok []bool) error {
	const batch = 1024 // IOV_MAX
	var (
		bb [][]byte
		aa []uint64
		ix []int
	)
	for i := range bufs {
		ok[i] = false
		if len(bufs[i]) == 0 || !m.Readable(addrs[i], uint64(len(bufs[i]))) {
			continue
		}
		bb, aa, ix = append(bb, bufs[i]), append(aa, addrs[i]), append(ix, i)
	}
	for len(bb) > 0 {
		k := min(len(bb), batch)
		var total uint64
		for _, b := range bb[:k] {
			total += uint64(len(b))
		}
		if err := m.charge(total); err != nil {
			return err
		}
		n, err := m.raw.readv(bb[:k], aa[:k])
		for j := 0; j < n; j++ {
			ok[ix[j]] = true
		}
		if err != nil || n < k {
			// The kernel stops at the first iovec it cannot fill: skip it
			// and go on with the rest.
			if n < k {
				n++
			}
		}
		bb, aa, ix = bb[n:], aa[n:], ix[n:]
	}
	return nil
}

// ErrBudget reports a snapshot that would read more than its budget.
var ErrBudget = errors.New("read budget of the snapshot spent")

func (m *Mem) charge(n uint64) error {
	if m.budget != 0 && m.used+n > m.budget {
		return fmt.Errorf("%w (%d bytes)", ErrBudget, m.budget)
	}
	m.used += n
	return nil
}

// U64 reads a little-endian uint64 at addr.
func (m *Mem) U64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// U32 reads a little-endian uint32 at addr.
func (m *Mem) U32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// fakeMem is a memory image for tests and fuzzing: regions backed by
// byte slices.
type fakeMem map[uint64][]byte

func (f fakeMem) regions() []region {
	var rs []region
	for a, b := range f {
		rs = append(rs, region{a, a + uint64(len(b))})
	}
	return rs
}

func (f fakeMem) readv(bufs [][]byte, addrs []uint64) (int, error) {
	for i, b := range bufs {
		found := false
		for a, src := range f {
			if addrs[i] >= a && addrs[i]+uint64(len(b)) <= a+uint64(len(src)) {
				copy(b, src[addrs[i]-a:])
				found = true
				break
			}
		}
		if !found {
			return i, ErrBadAddress
		}
	}
	return len(bufs), nil
}
