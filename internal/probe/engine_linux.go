package probe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
	"github.com/gosleuth/gosleuth/internal/tracefs"
	"golang.org/x/sys/unix"
)

// Offsets of the registers in the kernel's struct pt_regs (x86_64), as the
// program reads them.
var regOffset = map[Reg]int32{RAX: 80, RBX: 40, RCX: 88, R14: 8}

const (
	stackDepth   = 127 // PERF_MAX_STACK_DEPTH
	maxStacks    = 4096
	maxCallers   = 8192
	maxArgValues = 4096
	stackCost    = 1200 // ns a sampled stack adds to a hit (docs/probe.md, Cost)
	maxStacksPS  = 500  // sampled stacks a second per function
)

// maps is the program's kernel state for one target.
type maps struct {
	counts, cfg, stacks, callers, args *ebpf.Map
}

func (m *maps) close() {
	for _, x := range []*ebpf.Map{m.counts, m.cfg, m.stacks, m.callers, m.args} {
		if x != nil {
			x.Close()
		}
	}
}

func newMaps(n int) (*maps, error) {
	var m maps
	var err error
	mk := func(spec *ebpf.MapSpec) *ebpf.Map {
		if err != nil {
			return nil
		}
		var x *ebpf.Map
		x, err = ebpf.NewMap(spec)
		return x
	}
	m.counts = mk(&ebpf.MapSpec{Name: "gs_counts", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)})
	m.cfg = mk(&ebpf.MapSpec{Name: "gs_cfg", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(n)})
	m.stacks = mk(&ebpf.MapSpec{Name: "gs_stacks", Type: ebpf.StackTrace, KeySize: 4, ValueSize: stackDepth * 8, MaxEntries: maxStacks})
	m.callers = mk(&ebpf.MapSpec{Name: "gs_callers", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: maxCallers})
	m.args = mk(&ebpf.MapSpec{Name: "gs_args", Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: maxArgValues})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("create BPF maps: %w", err)
	}
	return &m, nil
}

// program counts a hit of probe cookie, samples its user stack one hit in
// cfg.every, and counts the value of the register at pt_regs offset
// cfg.argoff. It runs for the target's process only: a uprobe_multi link
// (multi) and a perf event are both attached to its PID, and the kernel
// runs the program for every thread of that process and no other. The
// program compares no PID itself: the PID its helpers give is the initial
// namespace's, which is not gosleuth's inside a container.
func program(m *maps, multi bool) (*ebpf.Program, error) {
	// incOrInit adds 1 to mp[key] (a key on the stack at RFP+key), or
	// creates it at 1 (a value written at RFP+val); then goes on at next.
	incOrInit := func(mp *ebpf.Map, key, val int16, label, next string) asm.Instructions {
		return asm.Instructions{
			asm.LoadMapPtr(asm.R1, mp.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, int32(key)),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label+"_new"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Ja.Label(next),
			asm.Mov.Imm(asm.R1, 1).WithSymbol(label + "_new"),
			asm.StoreMem(asm.RFP, val, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, mp.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, int32(key)),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, int32(val)),
			asm.Mov.Imm(asm.R4, 1), // BPF_NOEXIST
			asm.FnMapUpdateElem.Call(),
			asm.Ja.Label(next),
		}
	}
	insns := asm.Instructions{
		// R6 = ctx (pt_regs), R7 = the probe's cookie (its index).
		asm.Mov.Reg(asm.R6, asm.R1),
	}
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetAttachCookie.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreMem(asm.RFP, -4, asm.R7, asm.Word),
		// counts[id]++ (per CPU: no atomic needed).
		asm.LoadMapPtr(asm.R1, m.counts.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "cfg"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		// R8 = cfg[id].every, R9 = cfg[id].argoff.
		asm.LoadMapPtr(asm.R1, m.cfg.FD()).WithSymbol("cfg"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R8, asm.R0, 0, asm.Word),
		asm.LoadMem(asm.R9, asm.R0, 4, asm.Word),
		// One call in every: callers[{id, user stack id}]++.
		asm.JEq.Imm(asm.R8, 0, "args"),
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Reg32(asm.R0, asm.R8),
		asm.JNE.Imm(asm.R0, 0, "args"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, m.stacks.FD()),
		asm.Mov.Imm(asm.R3, 0x100), // BPF_F_USER_STACK
		asm.FnGetStackid.Call(),
		asm.JSLT.Imm(asm.R0, 0, "args"),
		asm.StoreMem(asm.RFP, -16, asm.R7, asm.Word),
		asm.StoreMem(asm.RFP, -12, asm.R0, asm.Word),
	)
	insns = append(insns, incOrInit(m.callers, -16, -24, "caller", "args")...)
	insns = append(insns,
		// args[{id, register value}]++ for the register at pt_regs+argoff.
		asm.JEq.Imm(asm.R9, 0, "exit").WithSymbol("args"),
		asm.JEq.Imm(asm.R9, regOffset[RAX], "rax"),
		asm.JEq.Imm(asm.R9, regOffset[RBX], "rbx"),
		asm.JEq.Imm(asm.R9, regOffset[RCX], "rcx"),
		asm.JEq.Imm(asm.R9, regOffset[R14], "r14"),
		asm.Ja.Label("exit"),
		asm.LoadMem(asm.R1, asm.R6, int16(regOffset[RAX]), asm.DWord).WithSymbol("rax"),
		asm.Ja.Label("store"),
		asm.LoadMem(asm.R1, asm.R6, int16(regOffset[RBX]), asm.DWord).WithSymbol("rbx"),
		asm.Ja.Label("store"),
		asm.LoadMem(asm.R1, asm.R6, int16(regOffset[RCX]), asm.DWord).WithSymbol("rcx"),
		asm.Ja.Label("store"),
		asm.LoadMem(asm.R1, asm.R6, int16(regOffset[R14]), asm.DWord).WithSymbol("r14"),
		asm.StoreMem(asm.RFP, -40, asm.R7, asm.Word).WithSymbol("store"),
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, -36, asm.R2, asm.Word),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.DWord),
	)
	insns = append(insns, incOrInit(m.args, -40, -48, "arg", "exit")...)
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	at := ebpf.AttachNone
	if multi {
		at = ebpf.AttachTraceUprobeMulti
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gosleuth_probe",
		Type:         ebpf.Kprobe,
		AttachType:   at,
		Instructions: insns,
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load the probe program: %w", err)
	}
	return prog, nil
}

// attached is one uprobe_multi link over some of the points, or one
// perf-event link per point.
type attached struct {
	ls []link.Link
	// since is when each point's probe went in: the attach call's return
	// for a link over all of them (the kernel installs the breakpoints at
	// its end), each event's own for perf events attached one by one.
	since map[int]time.Time
}

// close detaches every probe. Perf-event links close at once, side by
// side: each waits for the kernel to unregister its uprobe (70-100 ms
// measured here), and the waits overlap.
func (a *attached) close() {
	if len(a.ls) == 1 {
		a.ls[0].Close()
		return
	}
	var wg sync.WaitGroup
	for _, l := range a.ls {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
}

// prober loads the program for a mechanism and attaches it.
type prober struct {
	t     *Target
	prog  *ebpf.Program
	multi bool
	how   string // Options.Attach
}

// Mechanism texts (Result.Mechanism).
const (
	mechMulti = "BPF uprobe_multi link (one per target, all threads)"
	mechPerf  = "BPF on one uprobe perf event per function, attached to the target's PID (all its threads)"
)

// newProber loads the program for how (Options.Attach). Auto tries a
// uprobe_multi link on the first attach and falls back to perf events
// when the kernel has none.
func newProber(t *Target, m *maps, how string) (*prober, error) {
	p := &prober{t: t, multi: how != AttachPerf, how: how}
	var err error
	if p.prog, err = program(m, p.multi); err != nil && p.multi && how == AttachAuto {
		// A kernel without uprobe_multi refuses the attach type itself.
		p.multi = false
		p.prog, err = program(m, false)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (p *prober) close() { p.prog.Close() }

func (p *prober) mechanism() string {
	if p.multi {
		return mechMulti
	}
	return mechPerf
}

// attach puts probes on the points ids, with their index as cookie.
func (p *prober) attach(m *maps, pts []Point, ids []int) (*attached, error) {
	ex, err := link.OpenExecutable(p.t.Exe)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p.t.Exe, err)
	}
	wrap := func(err error) error {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("attach uprobes: %w (needs root)", err)
		}
		return fmt.Errorf("attach uprobes: %w", err)
	}
	if p.multi {
		addrs := make([]uint64, len(ids))
		cookies := make([]uint64, len(ids))
		for i, id := range ids {
			addrs[i] = pts[id].Offset
			cookies[i] = uint64(id)
		}
		l, err := ex.UprobeMulti(nil, p.prog, &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies, PID: uint32(p.t.kernelPID)})
		if err == nil {
			a := &attached{ls: []link.Link{l}, since: map[int]time.Time{}}
			now := time.Now()
			for _, id := range ids {
				a.since[id] = now
			}
			return a, nil
		}
		if p.how != AttachAuto || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, wrap(err)
		}
		// No uprobe_multi links here: the perf-event program from now on.
		prog, perr := program(m, false)
		if perr != nil {
			return nil, perr
		}
		p.prog.Close()
		p.prog, p.multi = prog, false
	}
	a := &attached{since: map[int]time.Time{}}
	for _, id := range ids {
		// One event on the target's PID: the kernel's uprobe filter
		// matches the process's memory, so the program runs for all of
		// its threads, new ones included, and the breakpoint goes into
		// no other process of the binary. (Counting with such an event
		// alone, without BPF, would see its main thread only.)
		l, err := ex.Uprobe("", p.prog, &link.UprobeOptions{Address: pts[id].Offset, Cookie: uint64(id), PID: p.t.kernelPID})
		if err != nil {
			a.close()
			return nil, wrap(err)
		}
		a.ls = append(a.ls, l)
		a.since[id] = time.Now()
	}
	return a, nil
}

func readCounts(m *maps, n int) ([]uint64, error) {
	out := make([]uint64, n)
	var per []uint64
	for i := range n {
		if err := m.counts.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		for _, v := range per {
			out[i] += v
		}
	}
	return out, nil
}

func resetCounts(m *maps, n int) error {
	zero := make([]uint64, ebpfPossibleCPUs())
	for i := range n {
		if err := m.counts.Put(uint32(i), zero); err != nil {
			return fmt.Errorf("reset counters: %w", err)
		}
	}
	return nil
}

func ebpfPossibleCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// Run probes process pid's functions for the window and returns what they
// saw. Functions that are absent are reported, not fatal; an error means
// nothing could be probed.
func Run(ctx context.Context, fs proc.FS, pid int, probes []Probe, o Options) (*Result, error) {
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Budget == 0 {
		o.Budget = 0.01
	}
	if o.Preflight <= 0 {
		o.Preflight = 100 * time.Millisecond
	}
	t, err := Resolve(fs, pid)
	if err != nil {
		return nil, err
	}
	// The kernel takes PIDs of gosleuth's own namespace; fs may be a
	// procfs of another (the host's /proc mounted in a container).
	if t.kernelPID, err = fs.LocalPID(pid); err != nil {
		return nil, err // it names the process and the namespace
	}
	res := &Result{PID: pid, GoVersion: t.GoVersion, Mechanism: "BPF uprobe_multi link (one per target, all threads)"}
	var pts []Point
	var probeOf []Probe
	stat := map[int]*FuncStat{} // by point index
	var funcIndex []int         // point index -> index in res.Funcs
	for _, p := range probes {
		pt, err := t.Find(p.Func)
		if err != nil {
			res.Funcs = append(res.Funcs, FuncStat{Func: p.Func, Skipped: err.Error()})
			continue
		}
		pts = append(pts, pt)
		probeOf = append(probeOf, p)
		res.Funcs = append(res.Funcs, FuncStat{Func: p.Func, Symbol: pt.Symbol, Kind: pt.Kind.String(), Arg: p.Arg.String()})
		funcIndex = append(funcIndex, len(res.Funcs)-1)
	}
	// Pointers into res.Funcs only once it has stopped growing.
	for i, fi := range funcIndex {
		stat[i] = &res.Funcs[fi]
	}
	if len(pts) == 0 {
		return res, fmt.Errorf("nothing to probe in process %d: %w", pid, ErrAbsent)
	}
	switch o.Attach {
	case AttachAuto, AttachMulti, AttachPerf, AttachTracefs:
	default:
		return nil, fmt.Errorf("probe: attach %q: want %q, %q or %q", o.Attach, AttachMulti, AttachPerf, AttachTracefs)
	}
	if o.Attach == AttachTracefs {
		return runTracefs(ctx, t, pts, stat, o, res)
	}
	// A gosleuth killed while attached through tracefs left its uprobe
	// definitions behind, and the next run may attach another way: remove
	// them whatever the mechanism. Best effort: without tracefs there is
	// nothing to remove, and a definition that cannot be removed now is
	// tried again at the next run.
	if root, err := tracefs.Root(); err == nil {
		janitor(root)
	}
	m, err := newMaps(len(pts))
	if err != nil {
		if o.Attach == AttachAuto && errors.Is(err, unix.EPERM) {
			// BPF refused (a lockdown, a seccomp filter, a container
			// without CAP_BPF): counting without it.
			res.Notes = append(res.Notes, "BPF was refused ("+err.Error()+"): counting through tracefs uprobes and perf events")
			return runTracefs(ctx, t, pts, stat, o, res)
		}
		return nil, err
	}
	defer m.close()
	pr, err := newProber(t, m, o.Attach)
	if err != nil {
		return nil, err
	}
	defer pr.close()

	all := indices(len(pts))
	// Pre-flight: counting only, to learn each function's rate.
	keep := all
	var hot []int // too hot to probe through the window: bursts
	rates := make([]float64, len(pts))
	if o.Budget > 0 {
		a, err := pr.attach(m, pts, all)
		if err != nil {
			return nil, err
		}
		// The pre-flight ends early once what it has cost reaches a
		// quarter of the window's budget: a function hot enough to do
		// that is measured well enough, and must not eat the budget.
		t0 := time.Now()
		preBudget := 0.25 * o.Budget * o.Duration.Seconds() * 1e9
		var c []uint64
		for {
			sleepCtx(ctx, 5*time.Millisecond)
			if c, err = readCounts(m, len(pts)); err != nil {
				a.close()
				return nil, err
			}
			var spent float64
			for i, n := range c {
				spent += float64(n) * pts[i].Kind.Cost()
			}
			if spent >= preBudget || time.Since(t0) >= o.Preflight || ctx.Err() != nil {
				break
			}
		}
		sec := time.Since(t0).Seconds()
		a.close()
		keep, hot = preflightSplit(c, sec, rates, stat, o.Budget, func(i int) float64 { return pts[i].Kind.Cost() })
		if err := resetCounts(m, len(pts)); err != nil {
			return nil, err
		}
	}
	// The window's configuration: stack sampling rate and argument.
	for _, i := range append(slices.Clone(keep), hot...) {
		every := 0
		if probeOf[i].Stacks {
			every = max(1, int(rates[i]/maxStacksPS))
			stat[i].StackEvery = every
		}
		if err := configure(m, i, every, probeOf[i].Arg); err != nil {
			return nil, err
		}
	}
	// A call's cost to the target: the probe's, and its share of a
	// sampled stack.
	cost := func(i int) float64 {
		c := pts[i].Kind.Cost()
		if e := stat[i].StackEvery; e > 0 {
			c += stackCost / float64(e)
		}
		return c
	}
	budgetNS := o.Budget * o.Duration.Seconds() * 1e9
	if o.Budget > 0 {
		keep, hot = shareBudget(keep, hot, rates, cost, o.Budget*1e9)
	}
	var keepNSPerSec float64
	for _, i := range keep {
		keepNSPerSec += rates[i] * cost(i)
	}
	var refused []int
	hot, refused = planBursts(hot, rates, cost, budgetNS, keepNSPerSec, o.Duration)
	for _, i := range refused {
		markTooHot(stat[i], rates[i], cost(i), o.Budget, ", even in bursts")
	}
	if len(keep) == 0 && len(hot) == 0 {
		res.Notes = append(res.Notes, "every function was too hot to probe within the budget, even in bursts")
		return res, nil
	}
	costs, prates := make([]float64, len(pts)), make([]float64, len(pts))
	for i := range pts {
		costs[i], prates[i] = cost(i), rates[i]
	}
	sc := newScheduler(keep, hot, costs, prates)
	sc.attach = func(ids []int) (*attached, error) { return pr.attach(m, pts, ids) }
	sc.read = func() ([]uint64, error) { return readCounts(m, len(pts)) }
	sc.budgetNS, sc.budgetNSPerSec = budgetNS, o.Budget*1e9
	sc.moved = func(i int, rate float64) float64 {
		if probeOf[i].Stacks {
			if every := max(1, int(rate/maxStacksPS)); every != stat[i].StackEvery && configure(m, i, every, probeOf[i].Arg) == nil {
				stat[i].StackEvery = every
			}
		}
		return cost(i)
	}
	t0 := time.Now()
	if err := sc.attachSteady(); err != nil {
		return nil, err
	}
	res.AttachMS = msSince(t0)
	res.Mechanism = pr.mechanism()
	sc.period, sc.start = burstPeriod(o.Duration), time.Now()
	sc.end = sc.start.Add(o.Duration)
	stop, done := make(chan struct{}), make(chan struct{})
	if o.Budget > 0 {
		go func() {
			defer close(done)
			sc.run(stop)
		}()
	} else {
		close(done) // no governor: no bursts, nothing moves
	}
	if o.Attached != nil {
		o.Attached()
	}
	res.Seconds = watchWindow(ctx, fs, pid, o, 50*time.Millisecond, res, func() (float64, bool) {
		if o.Budget <= 0 {
			return 0, false // no governor: nothing to read until the end
		}
		ns, err := sc.spent()
		return ns, err == nil
	})
	// The bursts end first, then the steady link: none may stay attached.
	close(stop)
	<-done
	took, cerr := sc.closeSteady()
	res.DetachMS = float64(took.Microseconds()) / 1e3
	if cerr != nil {
		return nil, cerr
	}
	if len(keep) == 0 && len(sc.burstAttach) > 0 {
		// Every function was sampled: a burst's attach and detach.
		res.AttachMS, res.DetachMS = medianMS(sc.burstAttach), medianMS(sc.burstClose)
	}
	ns, err := sc.spent() // every call at the cost it had
	if err != nil {
		return nil, err
	}
	if res.Seconds > 0 {
		res.CostCPU = ns / 1e9 / res.Seconds
	}
	if err := readCallers(fs, t, m, stat); err != nil {
		res.Notes = append(res.Notes, err.Error())
	}
	if err := readArgs(m, stat); err != nil {
		res.Notes = append(res.Notes, err.Error())
	}
	if sampled := sc.report(stat, res.Seconds, o.Budget, keep); len(sampled) > 0 {
		res.Notes = append(res.Notes, burstNote(stat, sampled, sc.replans))
	}
	if sc.err != nil {
		res.Notes = append(res.Notes, "bursts: "+sc.err.Error())
	}
	if slices.ContainsFunc(pts, func(p Point) bool { return p.Kind == SingleStepped }) {
		res.Notes = append(res.Notes, "single-stepped probes (no PUSHQ BP after the stack check) cost about 10 µs a call and their stacks lack the direct caller")
	}
	return res, nil
}

// watchWindow runs the window: every period it asks spent for what the
// probes have cost the target so far (ns; false: not known this time), and
// it ends at the window's end, when that reaches the budget, when the
// target exits or when ctx ends, noting why in res. It returns the
// window's seconds.
func watchWindow(ctx context.Context, fs proc.FS, pid int, o Options, every time.Duration, res *Result, spent func() (float64, bool)) float64 {
	start := time.Now()
	res.Start = start
	end := start.Add(o.Duration)
	budgetNS := o.Budget * o.Duration.Seconds() * 1e9
	exited := watchExit(fs, pid)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			res.Notes = append(res.Notes, "interrupted: the counts cover the window until then")
			return time.Since(start).Seconds()
		case <-exited:
			res.Exited = true
			return time.Since(start).Seconds()
		case now := <-tick.C:
			ns, ok := spent()
			if !now.Before(end) {
				return time.Since(start).Seconds()
			}
			if o.Budget > 0 && ok && ns >= budgetNS {
				res.BudgetSpent = true
				res.Notes = append(res.Notes, fmt.Sprintf("the budget (%.1f%% of a CPU over %s) was spent after %.2fs: the window ended there", 100*o.Budget, o.Duration, time.Since(start).Seconds()))
				return time.Since(start).Seconds()
			}
		}
	}
}

// indices returns 0..n-1.
func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// preflightSplit sets each function's pre-flight rate from its count c
// over sec seconds and returns those whose projected cost (cost(i) ns a
// call) fits the budget through the window, and those too hot for that.
func preflightSplit(c []uint64, sec float64, rates []float64, stat map[int]*FuncStat, budget float64, cost func(i int) float64) (keep, hot []int) {
	for i, n := range c {
		rates[i] = float64(n) / sec
		stat[i].PreflightPerSec = math.Round(rates[i])
		if rates[i]*cost(i)/1e9 > budget {
			hot = append(hot, i)
			continue
		}
		keep = append(keep, i)
	}
	return keep, hot
}

// markTooHot says why function s, at rate calls a second of cost ns each,
// is not probed; why, when set, follows "too hot to probe".
func markTooHot(s *FuncStat, rate, cost, budget float64, why string) {
	s.Skipped = fmt.Sprintf("too hot to probe%s (≥ %.0f calls/s would cost the target %.1f%% of a CPU, budget %.1f%%)", why, rate, 100*rate*cost/1e9, 100*budget)
}

// configure sets what the program takes at each call of probe i: a stack
// one call in every (0: none), and the register arg's value.
func configure(m *maps, i, every int, arg Reg) error {
	val := make([]byte, 8)
	le32(val[0:], uint32(every))
	le32(val[4:], uint32(regOffset[arg]))
	if err := m.cfg.Put(uint32(i), val); err != nil {
		return fmt.Errorf("configure probe: %w", err)
	}
	return nil
}

func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1e3 }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// readCallers turns the sampled stacks into calling sites per function.
func readCallers(fs proc.FS, t *Target, m *maps, stat map[int]*FuncStat) error {
	maps, err := fs.Maps(t.PID)
	if err != nil && !errors.Is(err, proc.ErrProcessGone) {
		return err
	}
	exe, _ := fs.Exe(t.PID)
	type key struct {
		id, stack uint32
	}
	var k [8]byte
	var n uint64
	samples := map[int]map[string]*Caller{}
	totals := map[int]uint64{}
	it := m.callers.Iterate()
	var frames [stackDepth]uint64
	for it.Next(&k, &n) {
		id := int(le32get(k[0:]))
		sid := le32get(k[4:])
		s := stat[id]
		if s == nil {
			continue
		}
		if err := m.stacks.Lookup(sid, &frames); err != nil {
			continue
		}
		var names []string
		var callers []stacks.Frame // the frames above the probed function, innermost first
		for depth, pc := range frames {
			if pc == 0 {
				break
			}
			va, ok := toVaddr(t, maps, exe, pc)
			if !ok {
				continue
			}
			// Return addresses point after the call: look up pc-1,
			// except the probed function's own frame.
			if depth > 0 {
				va--
			}
			fr := t.Frames(va)
			for _, f := range fr {
				names = append(names, f.Func)
			}
			if depth > 0 {
				callers = append(callers, fr...)
			}
		}
		// The caller named is the program's own code nearest the call
		// (sync.Mutex.Lock is inlined into its caller; os.ReadFile calls
		// os.OpenFile): the first frame outside the standard library's
		// plumbing, else the direct caller.
		var c *Caller
		for _, f := range callers {
			if !isRuntime(f.Func) {
				c = &Caller{Func: f.Func, File: f.File, Line: f.Line}
				break
			}
		}
		if c == nil && len(callers) > 0 {
			f := callers[0]
			c = &Caller{Func: f.Func, File: f.File, Line: f.Line}
		}
		if c == nil {
			continue
		}
		if len(names) > 1 {
			c.Stack = names[1:min(len(names), 9)]
		}
		ck := fmt.Sprintf("%s:%d %s", c.File, c.Line, c.Func)
		if samples[id] == nil {
			samples[id] = map[string]*Caller{}
		}
		if prev := samples[id][ck]; prev != nil {
			prev.Share += float64(n)
		} else {
			c.Share = float64(n)
			samples[id][ck] = c
		}
		totals[id] += n
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read sampled stacks: %w", err)
	}
	for id, cs := range samples {
		var list []Caller
		for _, c := range cs {
			c.Share /= float64(totals[id])
			list = append(list, *c)
		}
		slices.SortFunc(list, func(a, b Caller) int {
			if a.Share != b.Share {
				if a.Share > b.Share {
					return -1
				}
				return 1
			}
			return strings.Compare(a.Func, b.Func)
		})
		stat[id].Callers = list[:min(len(list), 10)]
	}
	return nil
}

func le32get(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// toVaddr maps a runtime address of the target to a link-time address of
// its executable (PIE binaries are loaded at a bias).
func toVaddr(t *Target, ms []proc.Mapping, exe string, pc uint64) (uint64, bool) {
	for _, m := range ms {
		if pc >= m.Start && pc < m.End && m.Exec {
			if m.Path != exe && strings.TrimSuffix(m.Path, " (deleted)") != exe {
				return 0, false
			}
			return t.bin.Vaddr(pc - m.Start + m.Offset)
		}
	}
	return pc, len(ms) == 0 // no maps (the process exited): not PIE, presumably
}

// readArgs turns the argument histograms into values by share.
func readArgs(m *maps, stat map[int]*FuncStat) error {
	var k [16]byte
	var n uint64
	vals := map[int][]ArgVal{}
	totals := map[int]uint64{}
	it := m.args.Iterate()
	for it.Next(&k, &n) {
		id := int(le32get(k[0:]))
		v := uint64(le32get(k[8:])) | uint64(le32get(k[12:]))<<32
		vals[id] = append(vals[id], ArgVal{Value: v, Count: n})
		totals[id] += n
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read arguments: %w", err)
	}
	for id, vs := range vals {
		if stat[id] == nil {
			continue
		}
		for i := range vs {
			vs[i].Share = float64(vs[i].Count) / float64(totals[id])
		}
		slices.SortFunc(vs, func(a, b ArgVal) int {
			if a.Count != b.Count {
				if a.Count > b.Count {
					return -1
				}
				return 1
			}
			if a.Value < b.Value {
				return -1
			}
			return 1
		})
		stat[id].Args = vs[:min(len(vs), 20)]
	}
	return nil
}

// watchExit returns a channel closed when process pid of fs exits.
func watchExit(fs proc.FS, pid int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for {
			if err := proc.CheckTarget(fs.Root(), pid); err != nil {
				close(done)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return done
}
