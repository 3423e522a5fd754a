package web

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// tracepointCounter counts with per-task counting perf events on the
// syscalls' tracepoints: only the target's threads pay (about a
// microsecond per call), other processes do not.
type tracepointCounter struct {
	c      *syscalls.Counter
	events []syscalls.Event
	sum    []uint64
}

func (t *tracepointCounter) read() (map[string]uint64, uint64, error) {
	clear(t.sum)
	total, _, err := t.c.Read(t.sum, false)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]uint64, len(t.events))
	for i, e := range t.events {
		out[e.Name] += t.sum[i]
	}
	return out, total, nil
}

func (t *tracepointCounter) close() { t.c.Close() }

// bpfCounter counts with one BPF program on raw_syscalls:sys_enter, for
// targets with too many threads for one event per thread and syscall.
type bpfCounter struct{ c *syscalls.BPFCounter }

func (b *bpfCounter) read() (map[string]uint64, uint64, error) {
	byNr, err := b.c.Read()
	if err != nil {
		return nil, 0, err
	}
	out := map[string]uint64{}
	var total uint64
	for nr, n := range byNr {
		total += n
		if name := syscalls.Name(syscalls.HostArch, nr); slices.Contains(exactNames, name) {
			out[name] += n
		}
	}
	return out, total, nil
}

func (b *bpfCounter) close() { b.c.Close() }

// newExactCounter attaches an exact counter to pid and names how it counts.
func newExactCounter(pid int) (exactCounter, string, error) {
	events, err := syscalls.SyscallEventsNamed(syscalls.HostArch, exactNames)
	if err != nil {
		return nil, "", fmt.Errorf("list syscall tracepoints: %w", err)
	}
	total, err := syscalls.TotalEvent()
	if err != nil {
		return nil, "", fmt.Errorf("count all syscalls: %w", err)
	}
	c, err := syscalls.NewCounter(pid, syscalls.CounterOptions{Events: events, ThreadsOnly: true, Total: &total})
	if errors.Is(err, syscalls.ErrTooManyFDs) {
		bc, err := syscalls.NewBPFCounter(pid)
		if err != nil {
			return nil, "", err
		}
		return &bpfCounter{bc}, "one BPF program on raw_syscalls:sys_enter (too many threads for per-task counters; every syscall on the host pays a few tens of ns)", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("count syscalls: %w", err)
	}
	return &tracepointCounter{c: c, events: events, sum: make([]uint64, len(events))}, fmt.Sprintf("per-task tracepoint counters on %d syscalls plus the total (the target pays about 1 us per call)", len(events)), nil
}
