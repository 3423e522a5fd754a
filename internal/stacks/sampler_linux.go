//go:build linux

package stacks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/perf"
	"github.com/gosleuth/gosleuth/internal/proc"
	"golang.org/x/sys/unix"
)

const (
	ringPages = 8   // data pages per thread: room for ~40 samples
	stackDump = 128 // bytes of user stack copied with each sample
)

// The sampler drains its rings and looks for new threads every
// pollInterval, and adapts: sooner (down to pollMin) while a ring is found
// more than half full, since a full ring loses samples; later (up to
// pollMax) once quietPolls polls in a row found no thread come or go and
// every ring under an eighth full. Each poll is a wake-up of gosleuth
// (on a virtual machine some 50 us of thread switches and of the Go
// runtime's sysmon, which wakes at each timer), and a target that barely
// runs, such as a shell the doctor looks at, needs few; a thread that
// appears after such a quiet spell is still picked up within pollMax.
const (
	pollInterval = 100 * time.Millisecond
	pollMin      = 25 * time.Millisecond
	pollMax      = 200 * time.Millisecond
	quietPolls   = 10
)

// nextPoll returns the wait before the next poll after one that waited
// cur, found the fullest ring at fill and changed threads or not; quiet
// counts the polls in a row without a change, and is updated.
func nextPoll(cur time.Duration, fill float64, changed bool, quiet *int) time.Duration {
	switch {
	case fill > 0.5:
		*quiet = 0
		return max(cur/2, pollMin)
	case changed:
		*quiet = 0
		return min(cur, pollInterval)
	}
	*quiet++
	if *quiet >= quietPolls && fill < 0.125 {
		return pollMax
	}
	return cur
}

type sampler struct {
	// gone counts the threads the Follower saw end.
	gone     int
	opts     Options
	fs       proc.FS
	raw      *Raw
	rings    map[int]*perf.Ring
	agg      map[string]*Stack
	key      []byte
	kern     []uint64
	user     []uint64
	userOnly bool
	t0, t1   uint64   // CLOCK_MONOTONIC ns of the /proc readings bounding the window
	times    []uint64 // sample times, to count those inside [t0, t1]
	// skipped counts threads left unsampled for lack of resources, the
	// first error saying why.
	skipped int
	skipErr error
	// cpuRings, when set, are one event per CPU sampling every task there
	// (samples of other processes are dropped): used instead of per-thread
	// rings when allowed, because they cost the target nothing at context
	// switches and see new threads at once.
	cpuRings []*perf.Ring
	foreign  int64
	// auto lets the sampler move from per-thread to per-CPU events once
	// when the target switches often; switchAt is when it did (monotonic
	// ns): thread samples after it and CPU samples before it are dropped.
	auto     bool
	switchAt uint64
	// off samples where threads block (nil unless Options.OffCPU).
	off *offCPU
	// bootStart is CLOCK_BOOTTIME when the first event was opened.
	bootStart time.Duration
}

// Sample samples the process opts.PID until ctx is done, opts.Duration
// passes or the process exits, and returns what it collected. An exit
// mid-run is not an error: Raw.Exited says so.
func Sample(ctx context.Context, opts Options) (*Raw, error) {
	if opts.Hz <= 0 {
		opts.Hz = 99
	}
	pid := opts.PID
	fs := proc.NewFS(opts.ProcRoot)
	exe, err := fs.Exe(pid)
	if err != nil {
		if _, serr := os.Stat(fs.PID(pid)); serr != nil {
			return nil, fmt.Errorf("profile process %d: %w", pid, ErrNotFound)
		}
		exe = ""
	}
	s := &sampler{
		opts:  opts,
		fs:    fs,
		rings: map[int]*perf.Ring{},
		agg:   map[string]*Stack{},
		raw: &Raw{PID: pid, Exe: strings.TrimSuffix(exe, " (deleted)"), Hz: opts.Hz,
			Period: time.Second / time.Duration(opts.Hz), Threads: map[int]string{}},
		userOnly: opts.UserOnly,
	}
	defer s.closeAll()
	id0, idErr := proc.ReadIdentity(opts.ProcRoot, pid)
	s.raw.maps = s.loadMaps(nil)
	perf.RaiseFDLimit() // one descriptor per thread; best effort

	pr, err := proc.NewReader(proc.Options{Root: opts.ProcRoot, PIDs: []int{pid}})
	if err != nil {
		return nil, fmt.Errorf("read /proc for process %d: %w", pid, err)
	}
	defer pr.Close()
	var first, last, scratch proc.Snapshot
	// takeLast reads /proc into scratch and keeps it as the last reading
	// only when the process was still there.
	takeLast := func() bool {
		var t uint64
		if !s.snapshot(pr, &scratch, &t) {
			return false
		}
		last, scratch = scratch, last
		s.t1 = t
		return true
	}

	if opts.OffCPU {
		if err := s.initOffCPU(); err != nil {
			return nil, err
		}
	}
	switch {
	case s.userOnly || opts.PerThread:
	case opts.PerCPU:
		if err := s.openCPUs(); err != nil {
			s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("per-CPU sampling unavailable (%v): one event per thread instead", err))
		}
	default:
		s.auto = true
	}
	s.raw.PerCPU = s.cpuRings != nil
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	s.bootStart = time.Duration(ts.Nano())
	fol := perf.NewFollower(opts.ProcRoot, pid, false)
	defer fol.Close()
	if err := s.follow(fol); err != nil {
		if errors.Is(err, perf.ErrExited) {
			return nil, fmt.Errorf("profile process %d: %w", pid, ErrNotFound)
		}
		return nil, err
	}
	// The window starts once the events are open, so the CPU time /proc
	// counts in it can all be sampled.
	firstOK := s.snapshot(pr, &first, &s.t0)
	if opts.Started != nil {
		opts.Started()
	}
	s.raw.Start = time.Now()
	var deadline <-chan time.Time
	if opts.Duration > 0 {
		timer := time.NewTimer(opts.Duration)
		defer timer.Stop()
		deadline = timer.C
	}
	every, quiet := pollInterval, 0
	tick := time.NewTimer(every)
	defer tick.Stop()
	lastOK := false
	nextSnap, nextProgress := time.Now().Add(pollInterval), time.Now().Add(time.Second)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline:
			break loop
		case now := <-tick.C:
			fill := s.drain()
			threads := s.raw.ThreadsSeen
			// An exited process not yet reaped (a zombie) ends the
			// window here too: the Follower's thread listing tells it
			// (proc.FS.TaskIDs) at no extra read.
			gone := s.gone
			if err := s.follow(fol); err != nil {
				if errors.Is(err, perf.ErrExited) {
					s.raw.Exited = true
					break loop
				}
				return nil, err
			}
			s.raw.PollLate = max(s.raw.PollLate, time.Since(now))
			every = nextPoll(every, fill, s.raw.ThreadsSeen != threads || s.gone != gone, &quiet)
			tick.Reset(every)
			if now.After(nextSnap) {
				if firstOK {
					lastOK = takeLast() || lastOK
				}
				if s.auto && lastOK {
					s.maybePerCPU(&first, &last)
				}
				// Libraries get mapped after exec and by dlopen.
				s.raw.maps = s.loadMaps(s.raw.maps)
				nextSnap = now.Add(time.Second)
				if s.auto {
					// Decide on the events soon: per-thread ones may
					// be costing the target already.
					nextSnap = now.Add(300 * time.Millisecond)
				}
			}
			if opts.Progress != nil && now.After(nextProgress) {
				opts.Progress(Progress{Elapsed: time.Since(s.raw.Start), Samples: s.raw.Samples,
					Lost: s.lost(), Threads: s.raw.ThreadsSeen, UserOnly: s.userOnly})
				nextProgress = now.Add(time.Second)
			}
		}
	}
	if !s.raw.Exited && firstOK {
		lastOK = takeLast() || lastOK
	}
	s.drain()
	s.raw.End = time.Now()
	s.raw.Lost = s.lost()
	s.raw.UserOnly = s.userOnly
	if !s.raw.Exited {
		s.raw.maps = s.loadMaps(s.raw.maps)
	}
	if firstOK && lastOK {
		s.window(&first, &last)
		for _, t := range s.times {
			if t >= s.t0 && t <= s.t1 {
				s.raw.WindowSamples++
			}
		}
	} else {
		s.raw.WindowSamples += s.raw.Samples
	}
	for _, st := range s.agg {
		s.raw.Stacks = append(s.raw.Stacks, st)
		if _, ok := s.raw.Threads[st.TID]; !ok {
			// Per-CPU events see threads the follower has not listed.
			if c := fs.ThreadComm(pid, st.TID); c != "" {
				s.raw.Threads[st.TID] = c
			}
		}
	}
	if s.off != nil {
		s.finishOff()
	}
	if s.userOnly {
		s.raw.Notes = append(s.raw.Notes, "kernel mode was not sampled (needs root or CAP_PERFMON with perf_event_paranoid <= 1): "+
			"each thread's system time from /proc is shown as a [kernel time, not sampled] leaf")
	}
	if s.skipped > 0 {
		s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("%d threads were not sampled (%v): raise perf_event_mlock_kb or RLIMIT_NOFILE, or run as root", s.skipped, s.skipErr))
	}
	if s.raw.Exited {
		s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("process %d exited after %s: the profile holds what was sampled until then",
			pid, s.raw.End.Sub(s.raw.Start).Round(time.Millisecond)))
	}
	// An exec or a PID reuse during the window changes what addresses
	// mean: say so rather than print names that may be wrong.
	if id1, err := proc.ReadIdentity(opts.ProcRoot, pid); err == nil && idErr == nil && !s.raw.Exited {
		switch {
		case id1.StartTime != id0.StartTime:
			s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("process %d exited during the profile and its PID now belongs to another process (%s): samples after the exit are that process's, and their names may be wrong",
				pid, id1.Exe))
		case id1.Exe != id0.Exe:
			s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("process %d executed a new program during the profile (%s, then %s): samples from before the exec may carry the new program's names",
				pid, id0.Exe, id1.Exe))
		}
	}
	return s.raw, nil
}

func (s *sampler) lost() int64 {
	n := s.raw.Lost
	for _, r := range s.cpuRings {
		n += int64(r.Lost())
	}
	for _, r := range s.rings {
		n += int64(r.Lost())
	}
	return n
}

// snapshot reads /proc, and sets mono to the monotonic clock halfway
// through the reading.
func (s *sampler) snapshot(pr *proc.Reader, dst *proc.Snapshot, mono *uint64) bool {
	before := monotonicNS()
	if err := pr.Snapshot(dst); err != nil || dst.Find(int32(s.opts.PID)) == nil {
		return false
	}
	*mono = before + (monotonicNS()-before)/2
	return true
}

func monotonicNS() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// window fills the process's CPU time between the two readings, with
// proc.Rates' definition (the threads' schedstat run time split by the
// clock ticks' ratio where the threads were read at both ends, else the
// ticks), and for a user-only run adds each thread's kernel clock ticks
// (TaskRate.SysTicks) as a synthetic stack.
func (s *sampler) window(first, last *proc.Snapshot) {
	var r proc.Rates
	r.Compute(first, last)
	pr, tasks := rateOf(&r, last, int32(s.opts.PID))
	if pr == nil {
		return
	}
	sec := r.Interval.Seconds()
	dur := func(pct float64) time.Duration { return time.Duration(pct / 100 * sec * float64(time.Second)) }
	s.raw.CPU = CPUTime{User: dur(pr.UserPct), System: dur(pr.SysPct), Known: true}
	if !s.userOnly {
		return
	}
	for i := range tasks {
		tr := &tasks[i]
		sys := time.Duration(tr.SysTicks) * (time.Second / proc.ClockTicks)
		n := int64(sys / s.raw.Period)
		if n == 0 {
			continue
		}
		t := tr.Task
		if _, ok := s.raw.Threads[int(t.TID)]; !ok {
			s.raw.Threads[int(t.TID)] = t.Comm
		}
		s.agg[fmt.Sprintf("synthetic %d", t.TID)] = &Stack{TID: int(t.TID), Mode: ModeKernel, Count: n, Synthetic: true}
		s.raw.WindowSamples += n
	}
}

// rateOf returns pid's rates in r, computed up to the snapshot last, and
// its threads' (nil when pid was not in both readings).
func rateOf(r *proc.Rates, last *proc.Snapshot, pid int32) (*proc.ProcRate, []proc.TaskRate) {
	p := last.Find(pid)
	if p == nil {
		return nil, nil
	}
	for i := range r.Procs {
		if pr := &r.Procs[i]; pr.Proc == p && !pr.New {
			lo, hi := last.TaskRange(p)
			return pr, r.Tasks[lo:hi]
		}
	}
	return nil, nil
}

func (s *sampler) attr() unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_CPU_CLOCK,
		Sample:      uint64(s.raw.Period.Nanoseconds()),
		Sample_type: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CALLCHAIN,
		Bits:        unix.PerfBitDisabled | unix.PerfBitExcludeHv | unix.PerfBitUseClockID,
		Clockid:     unix.CLOCK_MONOTONIC,
	}
	if userRegsMask != 0 {
		a.Sample_type |= unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER
		a.Sample_regs_user = userRegsMask
		a.Sample_stack_user = stackDump
	}
	if s.userOnly {
		a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeCallchainKernel
	}
	return a
}

// follow opens events on new threads and closes those of gone ones.
func (s *sampler) follow(fol *perf.Follower) error {
	added, gone, err := fol.Poll()
	s.gone += len(gone)
	for _, t := range gone {
		if r := s.rings[t.TID]; r != nil {
			s.read(r, false)
			s.raw.Lost += int64(r.Lost())
			r.Close()
			delete(s.rings, t.TID)
		}
		s.closeOff(t.TID)
	}
	for _, t := range added {
		if err := s.open(t.TID); err != nil {
			return err
		}
	}
	return err
}

func (s *sampler) open(tid int) error {
	if s.cpuRings == nil {
		if err := s.openThread(tid); err != nil || s.rings[tid] == nil {
			return err
		}
	}
	if s.off != nil {
		if err := s.openOff(tid); err != nil {
			return err
		}
	}
	s.raw.ThreadsSeen++
	if c := s.fs.ThreadComm(s.opts.PID, tid); c != "" {
		s.raw.Threads[tid] = c
	}
	s.pickup(tid)
	return nil
}

// openThread opens the on-CPU event of one thread.
func (s *sampler) openThread(tid int) error {
	attr := s.attr()
	r, err := perf.OpenRing(&attr, tid, s.pages())
	if err != nil && errors.Is(err, perf.ErrPermission) && !s.userOnly {
		s.userOnly = true
		attr = s.attr()
		r, err = perf.OpenRing(&attr, tid, s.pages())
	}
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil // the thread exited in between
		}
		if len(s.rings) > 0 && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EMFILE)) {
			// Out of locked memory for rings (perf_event_mlock_kb,
			// for non-root users) or descriptors: sample the threads
			// already open and say so.
			if s.skipped == 0 {
				s.skipErr = err
			}
			s.skipped++
			return nil
		}
		return fmt.Errorf("sample thread %d of process %d: %w", tid, s.opts.PID, err)
	}
	if err := r.Enable(); err != nil {
		r.Close()
		return fmt.Errorf("sample thread %d: %w", tid, err)
	}
	s.rings[tid] = r
	return nil
}

// cpuRingPages sizes each CPU's ring: it holds every task's samples there.
const cpuRingPages = 16

// openCPUs opens one cpu-clock event per online CPU for all tasks.
func (s *sampler) openCPUs() error {
	attr := s.attr()
	rings, err := perf.OpenCPURings(&attr, cpuRingPages)
	if err != nil {
		return fmt.Errorf("cpu-clock event: %w", err)
	}
	for _, r := range rings {
		if err := r.Enable(); err != nil {
			for _, r := range rings {
				r.Close()
			}
			return err
		}
	}
	s.cpuRings = rings
	return nil
}

// pickup records how long after its start a thread that began during the
// run got its event, from its start time in /proc (clock ticks since boot).
func (s *sampler) pickup(tid int) {
	ticks, err := s.fs.ThreadStartTime(s.opts.PID, tid)
	if err != nil {
		return
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	started := time.Duration(ticks) * (time.Second / proc.ClockTicks)
	now := time.Duration(ts.Nano())
	if started <= s.bootStart || now < started {
		return // it existed before sampling began
	}
	s.raw.NewThreads++
	if s.cpuRings == nil || s.off != nil {
		// Per-CPU events sample a new thread from its start; only
		// per-thread events wait for the follower.
		s.raw.PickupMax = max(s.raw.PickupMax, now-started)
	}
}

// pages is the ring size per thread: smaller for user-only sampling, whose
// records are smaller and whose rings count against the unprivileged
// perf_event_mlock_kb budget (516 KiB by default).
func (s *sampler) pages() int {
	if s.userOnly {
		return 2
	}
	return ringPages
}

// drain reads every ring and returns the fill of the fullest before it was
// read.
func (s *sampler) drain() float64 {
	var fill float64
	for _, r := range s.cpuRings {
		fill = max(fill, r.Fill())
		s.read(r, true)
	}
	for _, r := range s.rings {
		fill = max(fill, r.Fill())
		s.read(r, false)
	}
	if s.off != nil {
		for _, r := range s.off.rings {
			fill = max(fill, r.Fill())
			s.readOff(r)
		}
	}
	return fill
}

func (s *sampler) closeAll() {
	for _, r := range s.cpuRings {
		r.Close()
	}
	s.cpuRings = nil
	for tid, r := range s.rings {
		r.Close()
		delete(s.rings, tid)
	}
	if s.off != nil {
		for tid, r := range s.off.rings {
			r.Close()
			delete(s.off.rings, tid)
		}
	}
}

func (s *sampler) read(r *perf.Ring, perCPU bool) {
	r.Read(func(typ uint32, misc uint16, body []byte) {
		if typ == unix.PERF_RECORD_SAMPLE {
			s.sample(misc, body, perCPU)
		}
	})
}

// switchCost is what a per-thread cpu-clock event costs its thread at each
// context switch (the sampling timer is stopped and started again):
// measured here at about 4.5 us on a VM, where timer reprogramming traps.
const switchCost = 4e-6

// maybePerCPU moves to per-CPU events when per-thread ones would cost the
// target more than 1% of its CPU time (or of 5% of a CPU, for a nearly idle
// target) in voluntary context switches.
func (s *sampler) maybePerCPU(first, last *proc.Snapshot) {
	p0, p1 := first.Find(int32(s.opts.PID)), last.Find(int32(s.opts.PID))
	dt := float64(s.t1-s.t0) / 1e9
	if p0 == nil || p1 == nil || dt < 0.25 {
		return
	}
	s.auto = false
	// Voluntary switches only: they are the target's own blocking and
	// waking. Preemptions come from the machine's load, and a move taken
	// for them would trade exact per-thread counts for nothing the target
	// does.
	// Merged by thread (proc.Rates), as the window layer counts them: the
	// process's own sum covers live threads only.
	var r proc.Rates
	r.Compute(first, last)
	pr, _ := rateOf(&r, last, int32(s.opts.PID))
	if pr == nil || pr.Vol == 0 {
		return
	}
	rate := float64(pr.Vol) / dt
	cpu := (pr.UserPct + pr.SysPct) / 100
	if rate*switchCost <= 0.01*max(cpu, 0.05) {
		return
	}
	at := monotonicNS()
	if err := s.openCPUs(); err != nil {
		s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("the target switches %.0f times/s but per-CPU events are unavailable (%v): per-thread events cost it about %.1f%% of its CPU", rate, err, 100*rate*switchCost/max(cpu, 0.01)))
		return
	}
	s.switchAt = at
	for tid, r := range s.rings {
		s.read(r, false)
		s.raw.Lost += int64(r.Lost())
		r.Close()
		delete(s.rings, tid)
	}
	s.raw.PerCPU = true
	s.raw.Notes = append(s.raw.Notes, fmt.Sprintf("the target switched %.0f times/s: after %.1fs sampling moved from per-thread to per-CPU events, which cost it nothing per switch", rate, dt))
}

// Callchain context markers as unsigned values (PERF_CONTEXT_MAX, _KERNEL,
// _USER are -4095, -128, -512).
const (
	contextMax = ^uint64(4095) + 1
	ctxKernel  = ^uint64(127)
	ctxUser    = ^uint64(511)
)

// sample parses one PERF_RECORD_SAMPLE laid out as the attr asks: ip,
// pid/tid, time, callchain, then user regs and stack when asked for.
func (s *sampler) sample(misc uint16, b []byte, perCPU bool) {
	if perCPU && (len(b) < 16 || int(binary.NativeEndian.Uint32(b[8:])) != s.opts.PID) {
		s.foreign++
		return
	}
	tid, when, fixed, ok := s.parseSample(b)
	if !ok || (s.switchAt != 0 && perCPU == (when < s.switchAt)) {
		return
	}
	mode := ModeUser
	if misc&unix.PERF_RECORD_MISC_CPUMODE_MASK == unix.PERF_RECORD_MISC_KERNEL || len(s.kern) > 0 {
		mode = ModeKernel
	}
	s.raw.Samples++
	if fixed {
		s.raw.LeafFixed++
	}
	s.times = append(s.times, when)
	st := s.add(s.agg, tid, mode, fixed)
	st.Count++
}

// parseSample reads the thread, time and call chain of a sample into
// s.kern and s.user, repairing the leaf's caller when it can.
func (s *sampler) parseSample(b []byte) (tid int, when uint64, fixed, ok bool) {
	le := binary.NativeEndian
	if len(b) < 32 {
		return 0, 0, false, false
	}
	tid = int(le.Uint32(b[12:]))
	when = le.Uint64(b[16:])
	nr := le.Uint64(b[24:])
	b = b[32:]
	if nr > uint64(len(b)/8) {
		return 0, 0, false, false
	}
	s.kern, s.user = s.kern[:0], s.user[:0]
	var ctx uint64
	for i := uint64(0); i < nr; i++ {
		ip := le.Uint64(b[i*8:])
		if ip >= contextMax {
			ctx = ip
			continue
		}
		switch ctx {
		case ctxKernel:
			s.kern = append(s.kern, ip)
		case ctxUser:
			s.user = append(s.user, ip)
		}
	}
	b = b[nr*8:]
	if userRegsMask != 0 && len(b) >= 8 {
		abi := le.Uint64(b)
		b = b[8:]
		var regs []byte
		if abi != unix.PERF_SAMPLE_REGS_ABI_NONE {
			n := bits.OnesCount64(userRegsMask) * 8
			if len(b) < n {
				return 0, 0, false, false
			}
			regs, b = b[:n], b[n:]
		}
		if len(b) >= 8 {
			size := le.Uint64(b)
			b = b[8:]
			// size comes from the ring: compared without adding to it
			// (size+8 overflows for a size near 2^64).
			if size > 0 && size <= uint64(len(b)) && uint64(len(b))-size >= 8 {
				stack := b[:size]
				dyn := le.Uint64(b[size:])
				if dyn < size {
					stack = stack[:dyn]
				}
				fixed = regs != nil && s.fixLeaf(regs, stack)
			}
		}
	}
	return tid, when, fixed, true
}

// fixLeaf puts back the caller of a Go leaf that has no frame pointer of
// its own set up at the sampled PC: the return address sits at SP plus the
// function's SP delta from pcsp. It reports whether a frame was inserted.
func (s *sampler) fixLeaf(regs, stack []byte) bool {
	if len(s.user) == 0 {
		return false
	}
	ip := userIP(regs)
	if ip != s.user[0] {
		return false
	}
	m := findMapping(s.raw.maps, ip)
	if m == nil || m.obj == nil || !m.obj.isGo() {
		return false
	}
	va, ok := m.obj.vaddr(ip - m.start + m.off)
	if !ok {
		return false
	}
	d, ok := m.obj.spDelta(va)
	if !ok || d < 0 || int(d)+8 > len(stack) {
		return false
	}
	ret := binary.NativeEndian.Uint64(stack[d:])
	if len(s.user) > 1 && s.user[1] == ret {
		return false
	}
	if rm := findMapping(s.raw.maps, ret); rm == nil || rm.obj != m.obj {
		return false
	}
	s.user = append(s.user, 0)
	copy(s.user[2:], s.user[1:])
	s.user[1] = ret
	return true
}

// add returns the aggregated stack in agg for the chain in s.kern and
// s.user, creating it with a zero count.
func (s *sampler) add(agg map[string]*Stack, tid int, mode Mode, fixed bool) *Stack {
	k := s.key[:0]
	k = binary.NativeEndian.AppendUint32(k, uint32(tid))
	k = append(k, byte(mode), byte(len(s.kern)), byte(len(s.kern)>>8))
	if fixed {
		k = append(k, 1)
	}
	for _, a := range s.kern {
		k = binary.NativeEndian.AppendUint64(k, a)
	}
	for _, a := range s.user {
		k = binary.NativeEndian.AppendUint64(k, a)
	}
	s.key = k
	if st, ok := agg[string(k)]; ok {
		return st
	}
	st := &Stack{TID: tid, Mode: mode, LeafFixed: fixed,
		Kernel: append([]uint64(nil), s.kern...), User: append([]uint64(nil), s.user...)}
	agg[string(k)] = st
	return st
}

// loadMaps reads the target's executable mappings and loads their files,
// keeping mappings already known in prev (a process that exits keeps the
// maps read at the start).
func (s *sampler) loadMaps(prev []mapping) []mapping {
	f, err := os.Open(s.fs.PID(s.opts.PID, "maps"))
	if err != nil {
		return prev
	}
	ms := parseMaps(f)
	f.Close()
	known := map[[2]uint64]*object{}
	for _, m := range prev {
		known[[2]uint64{m.start, m.off}] = m.obj
	}
	for i := range ms {
		m := &ms[i]
		if o, ok := known[[2]uint64{m.start, m.off}]; ok {
			m.obj = o
			continue
		}
		if !strings.HasPrefix(m.path, "/") {
			continue
		}
		path := s.fs.PID(s.opts.PID, "root", m.path)
		if strings.TrimSuffix(m.path, " (deleted)") == s.raw.Exe {
			path = s.fs.PID(s.opts.PID, "exe")
		}
		o, err := loadObject(path)
		if err != nil {
			continue
		}
		// o is shared through the cache by every sampler of the same
		// binary: it is never written here (the mapping keeps its path).
		m.obj = o
	}
	return ms
}
