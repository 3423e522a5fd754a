package probe

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/tracefs"
)

// The fallback without BPF (AttachTracefs): each point is a uprobe defined
// in tracefs's uprobe_events under the group gosleuth_<our PID>, and each
// definition gets one sampling perf event per CPU (period 1, the sample
// holding the TID and PID) with a ring buffer: the hits of every thread of
// every process mapping the binary arrive, and those of the target are
// counted. Per-CPU events rather than per-thread ones, because a thread
// started after attach would be missed until found, and a perf event
// inherited into new threads kills the target (docs/probe.md); rather
// than one event for the target's PID, which follows its main thread
// alone. A sample costs more than a BPF counter and the ring can overflow
// at high rates: lost samples are counted and reported. Definitions are
// removed at the end; ones left by a gosleuth that was killed are removed
// by its guard (guard_linux.go) or, where none ran, by the janitor at the
// next start.

// traceRingBytes is the memory all of one attach's rings may take: it is
// shared out over its functions and CPUs (tracePages), so that a few hot
// functions get rings that outlast a drain delayed by a loaded machine.
// At 128 pages per ring, 32,768 samples of 16 bytes, a tight loop on two
// CPUs overflowed a ring in CI while another job loaded the machine (511
// of 200,000 hits lost, the 10 ms drain late by more than ~20 ms).
const traceRingBytes = 64 << 20

// tracePages is the data pages of each ring for fns functions on ncpu
// CPUs: traceRingBytes shared out, a power of two from 128 (512 KiB,
// 32,768 samples, 3.3 million hits a second per CPU between two drains)
// to 2,048 (8 MiB, 16 times that).
func tracePages(fns, ncpu int) int {
	per := traceRingBytes / os.Getpagesize() / max(fns*ncpu, 1)
	pages := 128
	for pages*2 <= per && pages < 2048 {
		pages *= 2
	}
	return pages
}

// traceProbes is the tracefs definitions and per-CPU rings of some points.
type traceProbes struct {
	root, group string
	tgid        uint32
	ids         []int          // point index of each definition
	rings       [][]*perf.Ring // per definition, per CPU
	counts      []uint64       // per point
	lost        uint64         // samples the rings dropped, summed by close
}

// tracefsGroup is the uprobe_events group of gosleuth process pid.
func tracefsGroup(pid int) string { return "gosleuth_" + strconv.Itoa(pid) }

// janitor removes the uprobe definitions of gosleuth processes that no
// longer run (killed before they could remove them), and reports how many.
func janitor(root string) (int, error) {
	return removeStale(root, func(pid int) bool { return !errors.Is(unix.Kill(pid, 0), unix.ESRCH) })
}

// removeStale removes the uprobe definitions of the gosleuth processes
// alive says are gone, and reports how many.
func removeStale(root string, alive func(pid int) bool) (int, error) {
	b, err := os.ReadFile(filepath.Join(root, "uprobe_events"))
	if err != nil {
		return 0, fmt.Errorf("read uprobe_events: %w", err)
	}
	stale := staleEvents(b, alive)
	for _, ev := range stale {
		if err := removeUprobe(root, ev); err != nil {
			return 0, err
		}
	}
	return len(stale), nil
}

// removeUprobe removes the definition of event ("group/name"). The kernel
// refuses (EBUSY) while the last perf event on it is still being torn
// down after its close, so it retries for up to a second: 20 attach and
// detach cycles of 18 functions once left a definition behind, and the
// next attach then failed with "file exists".
func removeUprobe(root, event string) error {
	wait := 5 * time.Millisecond
	for {
		err := writeUprobeEvents(root, "-:"+event)
		if !errors.Is(err, unix.EBUSY) || wait > 500*time.Millisecond {
			return err
		}
		time.Sleep(wait)
		wait *= 2
	}
}

func writeUprobeEvents(root, line string) error {
	f, err := os.OpenFile(filepath.Join(root, "uprobe_events"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open uprobe_events: %w", err)
	}
	_, werr := f.WriteString(line + "\n")
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write uprobe_events %q: %w", line, werr)
	}
	return cerr
}

// traceAttach defines the points ids and opens their per-CPU events.
func traceAttach(t *Target, pts []Point, ids []int) (tp *traceProbes, err error) {
	root, err := tracefs.Root()
	if err != nil {
		return nil, fmt.Errorf("tracefs uprobes: %w", err)
	}
	if _, err := janitor(root); err != nil {
		return nil, err
	}
	startGuard(root)
	// The definition names ROOT/PID/exe itself: the kernel follows the
	// magic link to the inode the process runs. The path it points to is
	// the target's, which gosleuth's mount namespace may not have (a
	// program in a container) or which may be gone (a binary replaced
	// or deleted since it started); it may also hold a space, which ends
	// a definition's path.
	exe := t.Exe
	tp = &traceProbes{root: root, group: tracefsGroup(os.Getpid()), tgid: uint32(t.kernelPID), counts: make([]uint64, len(pts))}
	defer func() {
		if err != nil {
			tp.close()
		}
	}()
	ncpu := 1
	if cpus, err := proc.OnlineCPUs(); err == nil {
		ncpu = len(cpus)
	}
	for _, id := range ids {
		name := "f" + strconv.Itoa(id)
		def := fmt.Sprintf("p:%s/%s %s:%#x", tp.group, name, exe, pts[id].Offset)
		err := writeUprobeEvents(root, def)
		if errors.Is(err, unix.EEXIST) {
			// Our own group (it carries our PID): a definition an
			// earlier attach of this process could not remove yet.
			if err = removeUprobe(root, tp.group+"/"+name); err == nil {
				err = writeUprobeEvents(root, def)
			}
		}
		if err != nil {
			return tp, err
		}
		tp.ids = append(tp.ids, id)
		tp.rings = append(tp.rings, nil)
		evid, err := perf.TracepointID(tp.group, name)
		if err != nil {
			return tp, err
		}
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: evid, Sample: 1,
			Sample_type: unix.PERF_SAMPLE_TID, Wakeup: 1 << 20, Bits: unix.PerfBitDisabled}
		rings, err := perf.OpenCPURings(&attr, tracePages(len(ids), ncpu))
		if err != nil {
			return tp, fmt.Errorf("uprobe event: %w", err)
		}
		tp.rings[len(tp.rings)-1] = rings
	}
	for _, rs := range tp.rings {
		for _, r := range rs {
			if err := r.Enable(); err != nil {
				return tp, err
			}
		}
	}
	return tp, nil
}

// drain counts the target's samples written since the last drain.
func (tp *traceProbes) drain() {
	for i, rs := range tp.rings {
		id := tp.ids[i]
		for _, r := range rs {
			r.Read(func(typ uint32, _ uint16, body []byte) {
				// PERF_SAMPLE_TID: u32 pid, u32 tid, in the PID
				// namespace of the event's opener (gosleuth's), where
				// the target is kernelPID; a process with no PID
				// there reads 0.
				if typ == unix.PERF_RECORD_SAMPLE && len(body) >= 8 && binary.NativeEndian.Uint32(body) == tp.tgid {
					tp.counts[id]++
				}
			})
		}
	}
}

// close disables the events, counts what they wrote, closes them and
// removes the definitions.
func (tp *traceProbes) close() error {
	for _, rs := range tp.rings {
		for _, r := range rs {
			r.Disable()
		}
	}
	tp.drain()
	for _, rs := range tp.rings {
		for _, r := range rs {
			tp.lost += r.Lost()
			r.Close()
		}
	}
	var errs []error
	for _, id := range tp.ids {
		if err := removeUprobe(tp.root, tp.group+"/f"+strconv.Itoa(id)); err != nil {
			errs = append(errs, err)
		}
	}
	tp.rings, tp.ids = nil, nil
	return errors.Join(errs...)
}

// mechTracefs is Result.Mechanism of the fallback without BPF.
const mechTracefs = "tracefs uprobe per function, a sampling perf event per function and CPU (no BPF: calls only)"

// traceSampleCost is what a sample adds to a hit (ns): the kernel writes
// 16 bytes into the ring of the CPU.
const traceSampleCost = 1000

// drainEvery is how often the rings are read (see tracePages).
const drainEvery = 10 * time.Millisecond

// runTracefs is Run without BPF (AttachTracefs): the same pre-flight,
// budget and window, counting calls only.
func runTracefs(ctx context.Context, t *Target, pts []Point, stat map[int]*FuncStat, o Options, res *Result) (*Result, error) {
	res.Mechanism = mechTracefs
	cost := func(i int) float64 { return pts[i].Kind.Cost() + traceSampleCost }
	all := indices(len(pts))
	keep := all
	rates := make([]float64, len(pts))
	if o.Budget > 0 {
		tp, err := traceAttach(t, pts, all)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		preBudget := 0.25 * o.Budget * o.Duration.Seconds() * 1e9
		for {
			sleepCtx(ctx, drainEvery)
			tp.drain()
			var spent float64
			for i, n := range tp.counts {
				spent += float64(n) * cost(i)
			}
			if spent >= preBudget || time.Since(t0) >= o.Preflight || ctx.Err() != nil {
				break
			}
		}
		sec := time.Since(t0).Seconds()
		if err := tp.close(); err != nil {
			return nil, err
		}
		var hot []int
		keep, hot = preflightSplit(tp.counts, sec, rates, stat, o.Budget, cost)
		for _, i := range hot {
			markTooHot(stat[i], rates[i], cost(i), o.Budget, " without BPF (no bursts there)")
		}
	}
	if len(keep) == 0 {
		res.Notes = append(res.Notes, "every function was too hot to probe within the budget")
		return res, nil
	}
	t0 := time.Now()
	tp, err := traceAttach(t, pts, keep)
	if err != nil {
		return nil, err
	}
	res.AttachMS = msSince(t0)
	if o.Attached != nil {
		o.Attached()
	}
	res.Seconds = watchWindow(ctx, t.fs, t.PID, o, drainEvery, res, func() (float64, bool) {
		tp.drain()
		spent := 0.0
		for _, i := range keep {
			spent += float64(tp.counts[i]) * cost(i)
		}
		return spent, true
	})
	t1 := time.Now()
	cerr := tp.close()
	res.DetachMS = msSince(t1)
	if cerr != nil {
		res.Notes = append(res.Notes, cerr.Error())
	}
	var ns float64
	for _, i := range keep {
		stat[i].Count = tp.counts[i]
		if res.Seconds > 0 {
			stat[i].PerSec = float64(tp.counts[i]) / res.Seconds
		}
		ns += float64(tp.counts[i]) * cost(i)
	}
	if res.Seconds > 0 {
		res.CostCPU = ns / 1e9 / res.Seconds
	}
	if tp.lost > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d hits were lost (the rings overflowed): the counts are low by at most that", tp.lost))
	}
	res.Notes = append(res.Notes, "without BPF: calls are counted, callers and arguments are not read")
	return res, nil
}
