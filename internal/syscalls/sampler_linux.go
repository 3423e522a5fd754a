//go:build linux

package syscalls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/gosleuth/gosleuth/internal/perf"
	"golang.org/x/sys/unix"
)

// Sampler records every syscall exit (and, for latency, entry) of the
// threads it is given, with per-task sampling events on raw_syscalls
// sys_enter/sys_exit (sample_period 1, PERF_SAMPLE_TID|TIME|RAW) into one
// mmap ring per thread. Rings cannot be inherited, so threads started
// later are covered from when AddThreads is called with them. With errors
// only, a tracepoint filter ("ret < 0") keeps the kernel from writing
// successful calls at all.
type Sampler struct {
	latency bool
	enterID uint64
	exitID  uint64
	pages   int
	threads map[int]*sampled
	// pending is the entry time of each thread's current syscall.
	pending map[uint32]uint64
	stats   map[int]*SyscallStats
	lost    uint64 // from closed rings
	opened  int
}

type sampled struct {
	ring    *perf.Ring
	enterFD int // latency: the entry event, writing into ring
}

// SyscallStats is what the Sampler saw of one syscall number.
type SyscallStats struct {
	// Calls is the number of exits seen (latency mode only; with errors
	// only, successful calls are filtered out in the kernel) and Failed
	// those returning an error, by errno.
	Calls  uint64
	Failed map[syscall.Errno]uint64
	// Latency holds entry-to-exit times in ns (latency mode).
	Latency *hdr.Histogram
}

// NewSampler prepares a sampler; latency also records entries to time
// every syscall (costly: every call writes two records).
func NewSampler(latency bool) (*Sampler, error) {
	exitID, err := perf.TracepointID("raw_syscalls", "sys_exit")
	if err != nil {
		return nil, err
	}
	s := &Sampler{latency: latency, exitID: exitID, pages: 64, threads: map[int]*sampled{},
		pending: map[uint32]uint64{}, stats: map[int]*SyscallStats{}}
	if latency {
		if s.enterID, err = perf.TracepointID("raw_syscalls", "sys_enter"); err != nil {
			return nil, err
		}
		s.pages = 1024
	}
	return s, nil
}

func (s *Sampler) attr(id uint64) unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      id,
		Sample:      1,
		Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_RAW,
		Bits:        unix.PerfBitDisabled,
		Wakeup:      1 << 20, // never woken: the rings are polled
	}
}

// AddThreads starts sampling threads not yet sampled; threads that have
// gone are skipped.
func (s *Sampler) AddThreads(tids []int) error {
	for _, tid := range tids {
		if _, ok := s.threads[tid]; ok {
			continue
		}
		t, err := s.open(tid)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return err
		}
		s.threads[tid] = t
		s.opened++
	}
	return nil
}

func (s *Sampler) open(tid int) (*sampled, error) {
	attr := s.attr(s.exitID)
	r, err := perf.OpenRing(&attr, tid, s.pages)
	if err != nil {
		return nil, fmt.Errorf("sample syscall exits: %w", err)
	}
	t := &sampled{ring: r, enterFD: -1}
	fail := func(op string, err error) (*sampled, error) {
		s.closeThread(t)
		return nil, fmt.Errorf("%s of thread %d: %w", op, tid, err)
	}
	if !s.latency {
		if err := unix.IoctlSetString(r.FD(), unix.PERF_EVENT_IOC_SET_FILTER, "ret < 0"); err != nil {
			return fail("filter syscall exits", err)
		}
	} else {
		ea := s.attr(s.enterID)
		if t.enterFD, err = perf.OpenTask(&ea, tid, -1); err != nil {
			return fail("sample syscall entries", err)
		}
		if err := unix.IoctlSetInt(t.enterFD, unix.PERF_EVENT_IOC_SET_OUTPUT, r.FD()); err != nil {
			return fail("share the ring of syscall entries", err)
		}
		if err := unix.IoctlSetInt(t.enterFD, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fail("enable syscall entries", err)
		}
	}
	if err := r.Enable(); err != nil {
		return fail("enable syscall exits", err)
	}
	return t, nil
}

func (s *Sampler) closeThread(t *sampled) {
	if t.enterFD >= 0 {
		unix.Close(t.enterFD)
	}
	s.lost += t.ring.Lost()
	t.ring.Close()
}

// RetireThreads reads what gone threads left in their rings and closes
// them.
func (s *Sampler) RetireThreads(tids []int) {
	for _, tid := range tids {
		if t, ok := s.threads[tid]; ok {
			t.ring.Read(s.record)
			s.closeThread(t)
			delete(s.threads, tid)
		}
	}
}

// Poll reads every ring.
func (s *Sampler) Poll() {
	for _, t := range s.threads {
		t.ring.Read(s.record)
	}
}

// Lost returns the records the kernel dropped because a ring was full. The
// kernel reports a loss with the next record it manages to write, so
// losses at the very end of a thread's life may go unreported.
func (s *Sampler) Lost() uint64 {
	n := s.lost
	for _, t := range s.threads {
		n += t.ring.Lost()
	}
	return n
}

// Threads returns the number of threads sampled so far.
func (s *Sampler) Threads() int { return s.opened }

// Stats returns what was seen, by syscall number.
func (s *Sampler) Stats() map[int]*SyscallStats { return s.stats }

// record decodes one sample: pid, tid (u32 each), time (u64), raw size
// (u32) and the tracepoint record, whose first u16 is the event id; for
// raw_syscalls the syscall number is at offset 8 and the return value (exit)
// at 16.
func (s *Sampler) record(typ uint32, _ uint16, b []byte) {
	if typ != unix.PERF_RECORD_SAMPLE || len(b) < 20 {
		return
	}
	tid := binary.NativeEndian.Uint32(b[4:])
	ts := binary.NativeEndian.Uint64(b[8:])
	size := int(binary.NativeEndian.Uint32(b[16:]))
	raw := b[20:]
	if size > len(raw) || size < 16 {
		return
	}
	id := uint64(binary.NativeEndian.Uint16(raw))
	nr := int(int64(binary.NativeEndian.Uint64(raw[8:])))
	if id == s.enterID && s.latency {
		s.pending[tid] = ts
		return
	}
	if id != s.exitID || size < 24 {
		return
	}
	ret := int64(binary.NativeEndian.Uint64(raw[16:]))
	st := s.stats[nr]
	if st == nil {
		st = &SyscallStats{Failed: map[syscall.Errno]uint64{}}
		if s.latency {
			st.Latency = hdr.New(1, 3600e9, 2)
		}
		s.stats[nr] = st
	}
	st.Calls++
	if ret < 0 && ret >= -4095 {
		st.Failed[syscall.Errno(-ret)]++
	}
	if s.latency {
		if start, ok := s.pending[tid]; ok && ts >= start {
			st.Latency.RecordValue(int64(ts - start))
			delete(s.pending, tid)
		}
	}
}

// Close stops sampling and releases every ring.
func (s *Sampler) Close() {
	for tid, t := range s.threads {
		s.closeThread(t)
		delete(s.threads, tid)
	}
}

// kernelErrnos names the restart codes a syscall interrupted by a signal
// returns inside the kernel (include/linux/errno.h); user space never sees
// them, the tracepoint does.
var kernelErrnos = map[syscall.Errno]string{
	512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 515: "ENOIOCTLCMD",
	516: "ERESTART_RESTARTBLOCK",
}

// ErrnoName names errno e (EBADF, ERESTARTSYS, or E<number>).
func ErrnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	if n := kernelErrnos[e]; n != "" {
		return n
	}
	return fmt.Sprintf("E%d", int(e))
}
