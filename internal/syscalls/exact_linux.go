package syscalls

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// Exact counts one process's syscalls by name, exactly, with the mechanism
// chosen when it was attached (see Mechanism). It is what the views use;
// Counter and BPFCounter are its two mechanisms. Close releases it.
type Exact struct {
	mech  Mechanism
	names []string
	// fellBack: BPF because the target had too many threads for
	// tracepoints.
	fellBack bool
	total    bool
	// Tracepoints.
	c      *Counter
	events []Event
	sum    []uint64
	// BPF.
	bpf *BPFCounter
}

// attachMu makes tracepoint counters attach one process at a time:
// attaches running side by side were seen to leave counters that never
// counted.
var attachMu sync.Mutex

// events caches the tracepoints of a list of names (reading a tracepoint's
// id is a tracefs read, and views attach every few seconds).
var events sync.Map // strings.Join(names, ",") -> []Event

func namedEvents(names []string) ([]Event, error) {
	key := strings.Join(names, ",")
	if v, ok := events.Load(key); ok {
		return v.([]Event), nil
	}
	evs, err := SyscallEventsNamed(HostArch, names)
	if err != nil {
		return nil, fmt.Errorf("list syscall tracepoints: %w", err)
	}
	events.Store(key, evs)
	return evs, nil
}

// CountExact attaches an exact counter to the thread group pid (every
// thread, present and future). It needs root and tracefs; errors wrap
// perf.ErrPermission when the kernel refuses and unix.ESRCH when the
// process is gone.
func CountExact(pid int, opts ExactOptions) (*Exact, error) {
	names := opts.Names
	if names == nil {
		names = CountedNames
	}
	if opts.Mechanism == BPF {
		return countBPF(pid, names, opts.Total, false)
	}
	evs, err := namedEvents(names)
	if err != nil {
		return nil, err
	}
	var total *Event
	if opts.Total {
		tot, err := TotalEvent()
		if err != nil {
			return nil, fmt.Errorf("count all syscalls: %w", err)
		}
		total = &tot
	}
	attachMu.Lock()
	c, err := NewCounter(pid, CounterOptions{Events: evs, ThreadsOnly: true, Total: total, FS: opts.FS})
	attachMu.Unlock()
	if errors.Is(err, ErrTooManyFDs) {
		// Thousands of threads (2,000 need 76,000 descriptors): one
		// BPF program counts them all.
		return countBPF(pid, names, opts.Total, true)
	}
	if err != nil {
		return nil, fmt.Errorf("count syscalls: %w", err)
	}
	e := &Exact{mech: Tracepoints, total: opts.Total, c: c, events: evs, sum: make([]uint64, len(evs))}
	for _, ev := range evs {
		if !slices.Contains(e.names, ev.Name) {
			e.names = append(e.names, ev.Name)
		}
	}
	return e, nil
}

func countBPF(pid int, names []string, total, fellBack bool) (*Exact, error) {
	bc, err := NewBPFCounter(pid)
	if err != nil {
		if fellBack {
			return nil, fmt.Errorf("count syscalls (too many threads for per-task counters): %w", err)
		}
		return nil, err
	}
	e := &Exact{mech: BPF, fellBack: fellBack, total: total, bpf: bc}
	for _, n := range names {
		if nr, ok := Number(HostArch, n); ok && !slices.Contains(e.names, Name(HostArch, nr)) {
			e.names = append(e.names, Name(HostArch, nr))
		}
	}
	return e, nil
}

// ExactAvailable says why CountExact cannot count here (no tracefs, no
// syscall tracepoints), or nil when it can try.
func ExactAvailable() error {
	if _, err := namedEvents(CountedNames); err != nil {
		return err
	}
	if _, err := TotalEvent(); err != nil {
		return fmt.Errorf("count all syscalls: %w", err)
	}
	return nil
}

// BPFWorks reports whether a BPF counter can be attached here (root, BPF
// and tracefs), by attaching one to gosleuth itself and releasing it.
func BPFWorks() bool {
	c, err := NewBPFCounter(os.Getpid())
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Read returns the counts since attach.
func (e *Exact) Read() (Reading, error) {
	r := Reading{ByName: make(map[string]uint64, len(e.names))}
	for _, n := range e.names {
		r.ByName[n] = 0
	}
	if e.mech == BPF {
		byNr, err := e.bpf.Read()
		if err != nil {
			return Reading{}, err
		}
		for nr, n := range byNr {
			if e.total {
				r.Total += n
			}
			if name := Name(HostArch, nr); slices.Contains(e.names, name) {
				r.ByName[name] += n
			}
		}
		return r, nil
	}
	clear(e.sum)
	total, _, err := e.c.Read(e.sum, false)
	if err != nil {
		return Reading{}, fmt.Errorf("read syscall counters: %w", err)
	}
	if e.total {
		r.Total = total
	}
	for i, ev := range e.events {
		r.ByName[ev.Name] += e.sum[i]
	}
	return r, nil
}

// Mechanism is how e counts.
func (e *Exact) Mechanism() Mechanism { return e.mech }

// Names are the syscalls counted by name: those asked for that this
// kernel has.
func (e *Exact) Names() []string { return e.names }

// Describe says how e counts and who pays, in a phrase for a report.
func (e *Exact) Describe() string {
	switch {
	case e.mech == BPF && e.fellBack:
		return "one BPF program on raw_syscalls:sys_enter (too many threads for per-task counters; every syscall on the host pays a few tens of ns)"
	case e.mech == BPF:
		return "one BPF program on raw_syscalls:sys_enter (every syscall on the host pays a few tens of ns)"
	case e.total:
		return fmt.Sprintf("per-task tracepoint counters on %d syscalls plus the total (the target pays about 1 us per call)", len(e.events))
	}
	return fmt.Sprintf("per-task tracepoint counters on %d syscalls (the target pays about 1 us per call)", len(e.events))
}

// Close releases the counter. Releasing tracepoint events waits for the
// kernel's grace periods (about 30 ms a syscall counted); callers that
// need not wait close in the background: every descriptor is
// close-on-exec and freed with gosleuth in any case.
func (e *Exact) Close() error {
	if e.bpf != nil {
		return e.bpf.Close()
	}
	return e.c.Close()
}
