// Package export is gosleuth's Prometheus exporter: the fleet view. It
// samples every process of the host in the background with the /proc engine
// (internal/proc) and keeps, per group of processes (a systemd unit, a
// container or pod, else an executable name), counters that stay monotonic
// when processes exit: CPU seconds by mode, wake-ups (voluntary context
// switches summed over all threads) and involuntary switches, plus gauges of
// processes, threads, RSS and descriptors. A scrape only writes the last
// snapshot, so its cost grows with the series, not with processes x files.
//
// PIDs appear only on an info series for the top processes by CPU,
// re-ranked at most once a minute, so series churn stays low.
package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/window"
)

// Config is what the exporter exports and how often it samples.
type Config struct {
	// ProcRoot is the procfs mount (proc.Options.Root; empty for the host's).
	ProcRoot string
	// Interval is the sampling period (default 1 s).
	Interval time.Duration
	// IdleAfter and IdleInterval: when nobody has scraped for IdleAfter
	// (default 1 min), the exporter samples every IdleInterval (default
	// 10 s) instead, so an unscraped exporter costs next to nothing; the
	// next scrape gets the last sample and brings back Interval.
	IdleAfter, IdleInterval time.Duration
	// GroupBy is the order of group kinds tried (default unit, container,
	// exe).
	GroupBy []string
	// TopN is how many processes get an info series with their PID
	// (default 20); Rerank is how often they are re-ranked (default 1 min).
	TopN   int
	Rerank time.Duration
	// Runtime reads the Go runtime metrics of Go processes that have a
	// runtime source (gosleuth's agent, else the process's memory),
	// summed per group.
	Runtime bool
	// NoMemory leaves the memory source out: only processes with the
	// agent give runtime series.
	NoMemory bool
	// IdleBackoff is proc.Options.IdleBackoff: a thread that has not run
	// for this many samples is checked once in this many (0 or 1: every
	// thread at every sample). Its counters stay exact, up to that many
	// samples late; most threads of a host sleep, and their checks were
	// most of the exporter's reads.
	IdleBackoff int
	// BPF reads every thread through the task iterator
	// (proc.Options.TasksFromBPF) rather than its files.
	BPF bool
	// MaxGroups caps the groups with series of their own; processes of
	// groups first seen beyond it are counted in the group "other" (default
	// 500).
	MaxGroups int
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = time.Minute
	}
	if c.IdleInterval <= 0 {
		c.IdleInterval = max(10*time.Second, c.Interval)
	}
	if len(c.GroupBy) == 0 {
		c.GroupBy = []string{KindUnit, KindContainer, KindExe}
	}
	if c.TopN <= 0 {
		c.TopN = 20
	}
	if c.Rerank <= 0 {
		c.Rerank = time.Minute
	}
	if c.MaxGroups <= 0 {
		c.MaxGroups = 500
	}
}

// idleStatEvery is proc.Options.IdleStatEvery: the RSS of a process that
// has not run is re-read once in 3 full passes (30 samples), two 15 s
// scrapes; those re-reads were half of the exporter's reads on a host of
// sleeping processes, bunched in every tenth sample.
const idleStatEvery = 3

// runtimeEvery is how many samples pass between two reads of the runtime
// sources.
const runtimeEvery = 5

// groupKey names a group.
type groupKey struct{ kind, name string }

// otherGroup collects the processes of groups beyond MaxGroups.
var otherGroup = groupKey{"other", "other"}

// shortGroup collects the processes seen in one sample only (KindShort).
var shortGroup = groupKey{KindShort, KindShort}

// GroupStats is one group's state at the last sample.
type GroupStats struct {
	Kind, Name string
	// Counters, monotonic over the exporter's life.
	UserSec, SysSec      float64
	Wakeups, Involuntary float64
	Processes, Threads   int
	RSSBytes             uint64
	FDs                  int64
	WorstFDRatio         float64        // highest fds/limit of its processes
	GoVersions           map[string]int // processes by Go release (nil in a published Snapshot when none)
	// RuntimeSources counts the processes whose Go runtime was read.
	RuntimeSources        int
	everSeen, lastTouched time.Time
}

// ProcInfo is a top process by CPU.
type ProcInfo struct {
	PID        int32
	Comm       string
	Kind, Name string
	CPUPct     float64
}

// Snapshot is what a scrape writes: the exporter's state after its last
// sample.
type Snapshot struct {
	Time    time.Time
	Groups  []GroupStats
	Top     []ProcInfo
	Self    SelfStats
	Dropped uint64 // processes counted in "other" because of MaxGroups, over the exporter's life
	// Findings are the doctor's last run (none before the first or when
	// the doctor is off), with DoctorRuns, DoctorErrors and DoctorSeconds
	// (the last run's duration).
	Findings                 []FindingSeries
	Runtime                  []RuntimeSeries
	DoctorRuns, DoctorErrors uint64
	DoctorSeconds            float64
}

// SelfStats is the exporter's own cost.
type SelfStats struct {
	CollectSeconds float64 // the last sample's duration
	Tasks          int     // threads read in the last sample
	Processes      int
	Samples        uint64
	Errors         uint64
	// TaskstatsOff says why the reader does not learn which processes ran
	// from taskstats (proc.Options.RanFromTaskstats) and reads every
	// thread instead; empty when it does. TaskstatsStill counts the
	// processes whose threads the last sample left unread.
	TaskstatsOff   string
	TaskstatsStill int
	// BPF is true when the reader uses the task iterator
	// (proc.Options.TasksFromBPF, --bpf); BPFOff says why not when it was
	// asked for.
	BPF    bool
	BPFOff string
}

// Exporter samples the host and holds the last Snapshot.
type Exporter struct {
	cfg    Config
	reader *proc.Reader

	prev, cur *proc.Snapshot
	// cpu is parallel to cur.Procs: each process's CPU over the last
	// interval, in cores (0 for one new in it).
	cpu       []float64
	groups    map[groupKey]*GroupStats
	procGroup map[procID]groupKey
	dropped   uint64
	top       []ProcInfo
	ranked    time.Time
	self      SelfStats

	findings []FindingSeries // the doctor's last run, groups resolved
	// curGroups is parallel to cur.Procs, prevGroups to prev.Procs: each
	// process's group, nil in the short-lived one. procGroup holds the
	// same for the processes of cur that have a group of their own.
	curGroups, prevGroups []*GroupStats
	rt                    map[groupKey]*rtGroup
	rtProcs               map[procID]*rtProc

	mu            sync.Mutex
	last          *Snapshot
	lastScrape    time.Time       // when Last was last called (a scrape)
	scraped       chan struct{}   // wakes an idle Run at a scrape
	published     chan struct{}   // closed once the first snapshot is published
	newFindings   []FindingSeries // a doctor run not yet taken by the sampler
	doctorRuns    uint64
	doctorErrors  uint64
	doctorSeconds float64
}

type procID struct {
	pid   int32
	start uint64
}

// New opens the /proc engine; call Run to sample.
func New(cfg Config) (*Exporter, error) {
	cfg.defaults()
	// Threads matter here for their switch counts only, and nothing
	// exports syscall counts: their stat and io reads (and descriptors,
	// whose cap they pushed other files over) would be spent for nothing.
	// A host that starts processes now and then would have /proc listed
	// in full at nearly every sample: the new PIDs are enough. A sleeping
	// process's RSS is re-read every idleStatEvery full passes. Taskstats
	// tells which processes of three threads or more ran, for one answer
	// each instead of a read per thread. With cfg.BPF (as root), one task
	// iterator read a sample gives every thread's switch counts and finds
	// new processes instead, and the options it makes moot apply where it
	// cannot serve. A process seen once counts in the short-lived group,
	// so what identifies it (its cgroup and executable) and its
	// descriptors are read when it is seen again (LateIdentity): under
	// 5,000 new processes a second those reads were 60% of the CPU.
	// Threads are summed in their process, switches merged by thread
	// (Proc.VolMerged), and not copied out (NoTasks).
	r, err := proc.NewReader(proc.Options{Root: cfg.ProcRoot, SkipKernelThreads: true, IdleBackoff: cfg.IdleBackoff,
		SwitchesOnly: true, SkipIO: true, SkipCmdline: true, NewPIDsOnly: true, IdleStatEvery: idleStatEvery, RanFromTaskstats: true,
		TasksFromBPF: cfg.BPF, LateIdentity: true, NoTasks: true})
	if err != nil {
		return nil, fmt.Errorf("exporter: %w", err)
	}
	e := &Exporter{cfg: cfg, reader: r, groups: map[groupKey]*GroupStats{}, procGroup: map[procID]groupKey{},
		prev: &proc.Snapshot{}, cur: &proc.Snapshot{}, rt: map[groupKey]*rtGroup{}, rtProcs: map[procID]*rtProc{},
		scraped: make(chan struct{}, 1), published: make(chan struct{})}
	// The short-lived group's series exist from the first scrape.
	e.group(shortGroup, time.Now())
	return e, nil
}

// Run samples every Interval until ctx ends, then closes the reader.
func (e *Exporter) Run(ctx context.Context) error {
	defer e.reader.Close()
	if err := e.Sample(); err != nil {
		return err
	}
	t, err := newTickTimer()
	if err != nil {
		return fmt.Errorf("exporter: %w", err)
	}
	defer t.stop()
	if err := t.reset(e.cfg.Interval); err != nil {
		return fmt.Errorf("exporter: %w", err)
	}
	next := time.Now().Add(e.cfg.Interval)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.scraped:
			// A scrape while idle: back to the short period at once.
			if time.Until(next) > e.cfg.Interval {
				next = time.Now().Add(e.cfg.Interval)
				if err := t.reset(e.cfg.Interval); err != nil {
					return fmt.Errorf("exporter: %w", err)
				}
			}
			continue
		case <-t.C():
		}
		if err := e.Sample(); err != nil {
			e.self.Errors++
		}
		d := e.cfg.Interval
		if e.idle() {
			d = e.cfg.IdleInterval
		}
		next = time.Now().Add(d)
		if err := t.reset(d); err != nil {
			return fmt.Errorf("exporter: %w", err)
		}
	}
}

// idle reports whether nobody has scraped for IdleAfter.
func (e *Exporter) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lastScrape.IsZero() {
		e.lastScrape = time.Now() // the idle clock starts with the exporter
	}
	return time.Since(e.lastScrape) >= e.cfg.IdleAfter
}

// Sample reads the host once and folds the interval into the groups.
func (e *Exporter) Sample() error {
	start := time.Now()
	e.prev, e.cur = e.cur, e.prev
	if err := e.reader.Snapshot(e.cur); err != nil {
		e.prev, e.cur = e.cur, e.prev
		return fmt.Errorf("exporter: read processes: %w", err)
	}
	first := e.self.Samples == 0
	e.self.Samples++
	now := e.cur.Time
	for _, g := range e.groups {
		g.Processes, g.Threads, g.RSSBytes, g.FDs, g.WorstFDRatio = 0, 0, 0, 0, 0
		clear(g.GoVersions)
	}
	sec := e.cur.Time.Sub(e.prev.Time).Seconds()
	e.cpu = grow(e.cpu, len(e.cur.Procs))
	// The processes of the last sample are matched to this one's by PID
	// (both sorted) with their groups, and each process's interval comes
	// from window.StepOf, without the copy of every thread that Rates
	// needs.
	prevGroups := e.curGroups
	e.curGroups = grow(e.prevGroups, len(e.cur.Procs))
	e.prevGroups = prevGroups
	short := e.group(shortGroup, now)
	j, threads := 0, 0
	for i := range e.cur.Procs {
		p := &e.cur.Procs[i]
		id := procID{p.PID, p.StartTime}
		for j < len(e.prev.Procs) && e.prev.Procs[j].PID < p.PID {
			e.forget(j)
			j++
		}
		// A process gets a group of its own once it is seen a second
		// time; until then it counts in the short-lived group. At the
		// first sample every process is long-lived enough.
		var g *GroupStats
		var was *proc.Proc // its last reading
		if j < len(e.prev.Procs) && e.prev.Procs[j].PID == p.PID {
			if e.prev.Procs[j].StartTime == p.StartTime {
				was, g = &e.prev.Procs[j], prevGroups[j]
			} else {
				e.forget(j)
			}
			j++
		}
		switch {
		case g != nil:
		case first || was != nil:
			g = e.groupFor(id, p, now)
		default:
			g = short
		}
		e.curGroups[i] = nil
		if g != short {
			e.curGroups[i] = g
		}
		g.Processes++
		g.Threads += int(p.Threads)
		threads += int(p.Threads)
		g.RSSBytes += p.RSSBytes
		if p.FDs >= 0 {
			g.FDs += int64(p.FDs)
			if p.FDLimit > 0 {
				g.WorstFDRatio = math.Max(g.WorstFDRatio, float64(p.FDs)/float64(p.FDLimit))
			}
		}
		if p.GoVersion != "" {
			g.GoVersions[p.GoVersion]++
		}
		g.lastTouched = now
		e.cpu[i] = 0
		if first {
			continue // the first sample is the baseline
		}
		// The window layer subtracts the two readings (was is nil for a
		// process born in the interval: everything it did is new).
		st := window.StepOf(was, p)
		g.UserSec += st.UserSec
		g.SysSec += st.SysSec
		if was != nil {
			e.cpu[i] = st.CPUSec / sec
		}
		if st.SwitchesKnown {
			g.Wakeups += float64(st.Wakeups)
			g.Involuntary += float64(st.Involuntary)
		}
	}
	for ; j < len(e.prev.Procs); j++ {
		e.forget(j)
	}
	// Runtime sources are read every runtimeEvery samples: each read is a
	// round trip to the agent (two wake-ups of ours and its), and runtime
	// counters need no 1 s resolution; at every sample they tripled the
	// exporter's idle wake-ups (9 to 26 a second).
	if e.cfg.Runtime && (e.self.Samples-1)%runtimeEvery == 0 {
		e.sampleRuntime(now)
	}
	if !first && (e.ranked.IsZero() || now.Sub(e.ranked) >= e.cfg.Rerank) {
		e.rank()
		e.ranked = now
	}
	e.self.CollectSeconds = time.Since(start).Seconds()
	e.self.Tasks = threads
	e.self.Processes = len(e.cur.Procs)
	e.self.TaskstatsOff = e.cur.Stats.TaskstatsOff
	e.self.BPF = e.cfg.BPF && e.cur.Stats.TasksFromBPFOff == ""
	e.self.BPFOff = e.cur.Stats.TasksFromBPFOff
	e.self.TaskstatsStill = e.cur.Stats.TaskstatsStill
	e.publish(now)
	return nil
}

// forget drops the group of the last sample's process j, which this
// sample does not have.
func (e *Exporter) forget(j int) {
	if e.prevGroups[j] != nil {
		p := &e.prev.Procs[j]
		delete(e.procGroup, procID{p.PID, p.StartTime})
	}
}

// grow returns s with length n, reallocated only when too small.
func grow[T any](s []T, n int) []T { return slices.Grow(s[:0], n)[:n] }

// groupFor returns the group of a process, assigning one at first sight.
func (e *Exporter) groupFor(id procID, p *proc.Proc, now time.Time) *GroupStats {
	key, ok := e.procGroup[id]
	if !ok {
		kind, name := groupOf(e.cfg.GroupBy, p.Cgroup, p.Comm)
		key = groupKey{kind, name}
		if _, exists := e.groups[key]; !exists && len(e.groups) >= e.cfg.MaxGroups {
			key = otherGroup
			e.dropped++
		}
		e.procGroup[id] = key
	}
	return e.group(key, now)
}

// group returns the group key, made at first use.
func (e *Exporter) group(key groupKey, now time.Time) *GroupStats {
	g := e.groups[key]
	if g == nil {
		g = &GroupStats{Kind: key.kind, Name: key.name, GoVersions: map[string]int{}, everSeen: now}
		e.groups[key] = g
	}
	return g
}

// rank picks the top processes by CPU over the last interval.
func (e *Exporter) rank() {
	type cand struct {
		i   int
		cpu float64
	}
	var cs []cand
	for i := range e.cur.Procs {
		if c := e.cpu[i] * 100; c > 0 {
			cs = append(cs, cand{i, c})
		}
	}
	sort.Slice(cs, func(a, b int) bool { return cs[a].cpu > cs[b].cpu })
	e.top = e.top[:0]
	for _, c := range cs[:min(len(cs), e.cfg.TopN)] {
		p := &e.cur.Procs[c.i]
		k, ok := e.procGroup[procID{p.PID, p.StartTime}]
		if !ok {
			k = shortGroup
		}
		e.top = append(e.top, ProcInfo{PID: p.PID, Comm: p.Comm, Kind: k.kind, Name: k.name, CPUPct: c.cpu})
	}
}

// takeFindings resolves the groups of a doctor run's processes, when one
// finished since the last sample.
func (e *Exporter) takeFindings() {
	e.mu.Lock()
	fs := e.newFindings
	e.newFindings = nil
	e.mu.Unlock()
	if fs == nil {
		return
	}
	for i := range fs {
		fs[i].Kind, fs[i].Name = KindExe, fs[i].Comm // exited since: its name
		for j := range e.cur.Procs {
			if p := &e.cur.Procs[j]; int(p.PID) == fs[i].PID {
				if k, ok := e.procGroup[procID{p.PID, p.StartTime}]; ok {
					fs[i].Kind, fs[i].Name = k.kind, k.name
				}
				break
			}
		}
	}
	e.findings = fs
}

// publish copies the state for scrapes.
func (e *Exporter) publish(now time.Time) {
	e.takeFindings()
	s := &Snapshot{Time: now, Self: e.self, Dropped: e.dropped, Top: slices.Clone(e.top), Findings: e.findings}
	rt, rtProcs := e.publishRuntime()
	s.Runtime = rt
	// A copy a sample, the exporter's garbage: the groups' slice made to
	// size, and a map of Go versions only for the groups that have one.
	s.Groups = make([]GroupStats, 0, len(e.groups))
	for _, g := range e.groups {
		c := *g
		c.RuntimeSources = rtProcs[groupKey{g.Kind, g.Name}]
		c.GoVersions = nil
		if len(g.GoVersions) > 0 {
			c.GoVersions = maps.Clone(g.GoVersions)
		}
		s.Groups = append(s.Groups, c)
	}
	sort.Slice(s.Groups, func(a, b int) bool {
		if s.Groups[a].Kind != s.Groups[b].Kind {
			return s.Groups[a].Kind < s.Groups[b].Kind
		}
		return s.Groups[a].Name < s.Groups[b].Name
	})
	e.mu.Lock()
	s.DoctorRuns, s.DoctorErrors, s.DoctorSeconds = e.doctorRuns, e.doctorErrors, e.doctorSeconds
	if e.last == nil {
		close(e.published)
	}
	e.last = s
	e.mu.Unlock()
}

// Published is closed once the first sample is published: a scrape
// before it gets an error (Last), so a server waits for it before it
// serves.
func (e *Exporter) Published() <-chan struct{} { return e.published }

// Last returns the last published snapshot, or an error before the first.
func (e *Exporter) Last() (*Snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lastScrape = time.Now()
	select {
	case e.scraped <- struct{}{}:
	default:
	}
	if e.last == nil {
		return nil, errors.New("exporter: no sample yet")
	}
	return e.last, nil
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }
