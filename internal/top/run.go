package top

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/units"
)

// Config is what "gosleuth top" was asked to do.
type Config struct {
	// Interval between refreshes.
	Interval time.Duration
	// PIDs restricts the view to these processes (and shows their threads).
	PIDs []int
	// View holds the initial sort, tree, threads and filter settings.
	View View
	// Once prints one table after one interval and exits.
	Once bool
	// JSON prints one JSON object per interval (NDJSON) instead of a table.
	JSON bool
	// Count stops after this many intervals (0: until interrupted).
	Count int
	// Interactive runs the terminal UI; otherwise tables or JSON go to stdout.
	Interactive bool
	// MaxFDs caps the /proc descriptors kept open.
	MaxFDs int
	// Root is the procfs mount point.
	Root string
	// DeniedNote is shown when some cells could not be read; empty: the
	// default, which tells a user who is not root to run as root.
	DeniedNote string
}

// deniedNote is the note for cells that could not be read.
func (c *Config) deniedNote() string {
	if c.DeniedNote != "" {
		return c.DeniedNote
	}
	return deniedNote
}

// ErrNotFound reports a --pid that does not exist.
var ErrNotFound = errors.New("not found")

// sampler owns the reader and two snapshots, and computes rates and
// gosleuth's own cost between them.
type sampler struct {
	r          *proc.Reader
	prev, cur  *proc.Snapshot
	rates      proc.Rates
	self       selfUsage  // gosleuth's own usage at the last step
	selfCPU    [2]float64 // user, sys percent of one CPU over the last step
	watch      []int
	lastExited []int
}

func newSampler(cfg *Config) (*sampler, error) {
	r, err := proc.NewReader(proc.Options{
		Root:              cfg.Root,
		MaxFDs:            cfg.MaxFDs,
		PIDs:              cfg.PIDs,
		SkipKernelThreads: !cfg.View.Kernel && len(cfg.PIDs) == 0,
		// A busy host starts thousands of processes a second, most gone
		// before the next refresh: read them in full only when seen twice
		// (their CPU and RSS still show at first sight).
		DeferNew: len(cfg.PIDs) == 0,
		// The switch counts of the threads that ran, in one taskstats
		// question a refresh rather than a status read each (as root;
		// otherwise the statuses are read).
		SwitchesFromTaskstats: true,
		// As root, one BPF task iterator read a refresh gives what
		// every thread's schedstat, status and stat and every process's
		// stat and io show, instead of those reads, the taskstats
		// question and a /proc listing: 0.66 ms a refresh instead of
		// 1.52 ms on a host of 632 threads, 1.02 instead of 4.33 ms under
		// 5,000 new processes a second (bench/reader-churn).
		TasksFromBPF: len(cfg.PIDs) == 0,
	})
	if err != nil {
		return nil, err
	}
	s := &sampler{r: r, prev: new(proc.Snapshot), cur: new(proc.Snapshot), watch: cfg.PIDs}
	s.self = readSelfUsage()
	if err := r.Snapshot(s.cur); err != nil {
		r.Close()
		return nil, fmt.Errorf("read processes: %w", err)
	}
	for _, pid := range cfg.PIDs {
		if s.cur.Find(int32(pid)) == nil {
			r.Close()
			return nil, fmt.Errorf("process %d %w", pid, ErrNotFound)
		}
	}
	return s, nil
}

// step takes a new snapshot and computes rates against the previous one.
func (s *sampler) step() error {
	s.prev, s.cur = s.cur, s.prev
	if err := s.r.Snapshot(s.cur); err != nil {
		return fmt.Errorf("read processes: %w", err)
	}
	s.rates.Compute(s.prev, s.cur)
	now := readSelfUsage()
	if dt := s.rates.Interval.Seconds(); dt > 0 {
		s.selfCPU[0] = (now.user - s.self.user).Seconds() / dt * 100
		s.selfCPU[1] = (now.sys - s.self.sys).Seconds() / dt * 100
	}
	s.self = now
	s.lastExited = s.lastExited[:0]
	for _, pid := range s.watch {
		if s.cur.Find(int32(pid)) == nil {
			s.lastExited = append(s.lastExited, pid)
		}
	}
	return nil
}

// allExited reports whether every watched PID has exited.
func (s *sampler) allExited() bool {
	return len(s.watch) > 0 && len(s.lastExited) == len(s.watch)
}

func (s *sampler) close() { s.r.Close() }

// Run runs top until ctx is done, Count intervals have passed, or the
// watched processes have exited.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	s, err := newSampler(&cfg)
	if err != nil {
		return err
	}
	defer s.close()
	if cfg.Interactive && !cfg.Once && !cfg.JSON {
		return runTUI(ctx, &cfg, s, stderr)
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	count := cfg.Count
	if cfg.Once {
		count = 1
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for n := 0; count == 0 || n < count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := s.step(); err != nil {
			return err
		}
		if cfg.JSON {
			err = writeJSON(w, &cfg, s)
		} else {
			err = writeTable(w, &cfg, s, n > 0)
		}
		if err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
		if s.allExited() {
			fmt.Fprintf(stderr, "gosleuth: process %s exited\n", joinInts(s.lastExited))
			return nil
		}
	}
	return nil
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

// threads counts the threads of the processes in the latest snapshot.
func (s *sampler) threads() int {
	n := 0
	for _, p := range s.cur.Procs {
		n += int(p.Threads)
	}
	return n
}

// summary is the one-line description of gosleuth's own cost.
func (s *sampler) summary() string {
	st := s.cur.Stats
	return fmt.Sprintf("gosleuth: cpu %.1f%% (usr %.1f sys %.1f)  peak rss %s  kept fds %d/%d  refresh %.1f ms",
		s.selfCPU[0]+s.selfCPU[1], s.selfCPU[0], s.selfCPU[1], units.Bytes(s.self.rss),
		st.KeptFDs, st.MaxFDs, float64(st.Duration.Microseconds())/1000)
}

const deniedNote = "some cells show '-': no permission to read them (fds, io, executable); run as root to see all"

func writeTable(w io.Writer, cfg *Config, s *sampler, sep bool) error {
	if sep {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%s  procs %d  threads %d  interval %s\n", time.Now().Format("15:04:05"), len(s.cur.Procs), s.threads(), s.rates.Interval.Round(time.Millisecond))
	fmt.Fprintln(w, s.summary())
	if s.cur.Stats.Denied {
		fmt.Fprintln(w, cfg.deniedNote())
	}
	v := &cfg.View
	fmt.Fprintln(w, FormatLine(Header(), 0))
	var cells []string
	for _, r := range v.Rows(s.cur, &s.rates) {
		cells = v.Cells(r, cells)
		if _, err := fmt.Fprintln(w, FormatLine(cells, 0)); err != nil {
			return err
		}
	}
	return nil
}

// jsonProc is one process in the NDJSON stream. Fields that could not be
// read are null.
type jsonProc struct {
	PID         int32    `json:"pid"`
	PPID        int32    `json:"ppid"`
	User        string   `json:"user"`
	Comm        string   `json:"comm"`
	Cmdline     string   `json:"cmdline"`
	State       string   `json:"state"`
	CPUUser     float64  `json:"cpu_user_pct"`
	CPUSys      float64  `json:"cpu_sys_pct"`
	CPUChildren float64  `json:"cpu_children_pct"`
	RSS         uint64   `json:"rss_bytes"`
	Threads     int32    `json:"threads"`
	FDs         *int32   `json:"fds"`
	FDLimit     *int64   `json:"fd_limit"`
	Vol         float64  `json:"voluntary_ctxsw_per_s"`
	Invol       float64  `json:"nonvoluntary_ctxsw_per_s"`
	Syscalls    *float64 `json:"syscalls_rw_per_s"`
	RunQueue    float64  `json:"runqueue_pct"`
	GoVersion   *string  `json:"go_version"`
	// Container is the container the cgroup path names; absent on the
	// host.
	Container  *proc.Container `json:"container,omitempty"`
	StartTicks uint64          `json:"start_ticks"`
	New        bool            `json:"new,omitempty"`
	Tasks      []jsonTask      `json:"tasks,omitempty"`
}

type jsonTask struct {
	TID     int32   `json:"tid"`
	Comm    string  `json:"comm"`
	State   string  `json:"state"`
	CPUUser float64 `json:"cpu_user_pct"`
	CPUSys  float64 `json:"cpu_sys_pct"`
	Vol     float64 `json:"voluntary_ctxsw_per_s"`
	Invol   float64 `json:"nonvoluntary_ctxsw_per_s"`
}

type jsonSelf struct {
	CPUUser   float64 `json:"cpu_user_pct"`
	CPUSys    float64 `json:"cpu_sys_pct"`
	RSS       uint64  `json:"rss_bytes"`
	KeptFDs   int     `json:"kept_fds"`
	RefreshMS float64 `json:"refresh_ms"`
}

type jsonRecord struct {
	Time      time.Time  `json:"time"`
	IntervalS float64    `json:"interval_s"`
	Self      jsonSelf   `json:"self"`
	Note      string     `json:"note,omitempty"`
	Processes []jsonProc `json:"processes"`
}

func writeJSON(w io.Writer, cfg *Config, s *sampler) error {
	v := &cfg.View
	rec := jsonRecord{
		Time:      s.cur.Time,
		IntervalS: s.rates.Interval.Seconds(),
		Self: jsonSelf{CPUUser: round2(s.selfCPU[0]), CPUSys: round2(s.selfCPU[1]), RSS: s.self.rss,
			KeptFDs: s.cur.Stats.KeptFDs, RefreshMS: round2(float64(s.cur.Stats.Duration.Microseconds()) / 1000)},
		Processes: make([]jsonProc, 0, len(s.cur.Procs)),
	}
	if s.cur.Stats.Denied {
		rec.Note = cfg.deniedNote()
	}
	threads := v.Threads
	v.Threads = false
	rows := v.Rows(s.cur, &s.rates)
	v.Threads = threads
	for _, r := range rows {
		p, pr := r.Proc, r.Rate
		jp := jsonProc{PID: p.PID, PPID: p.PPID, User: v.userName(p.UID), Comm: p.Comm, Cmdline: p.Cmdline,
			State: string(rune(p.State)), RSS: p.RSSBytes, Threads: p.Threads, StartTicks: p.StartTime,
			Container: v.Container(p)}
		if pr != nil {
			jp.New = pr.New
			jp.CPUUser, jp.CPUSys = round2(pr.UserPct), round2(pr.SysPct)
			jp.CPUChildren = round2(pr.ChildUserPct + pr.ChildSysPct)
			jp.Vol, jp.Invol = round2(pr.VolPerSec), round2(pr.InvolPerSec)
			jp.RunQueue = round2(pr.RunQueuePct)
			if pr.SyscallsPerSec >= 0 {
				x := round2(pr.SyscallsPerSec)
				jp.Syscalls = &x
			}
		}
		if p.Known&proc.KnownFDs != 0 {
			x := p.FDs
			jp.FDs = &x
		}
		if p.Known&proc.KnownFDLimit != 0 {
			x := p.FDLimit
			jp.FDLimit = &x
		}
		if p.Known&proc.KnownExe != 0 {
			x := p.GoVersion
			jp.GoVersion = &x
		}
		if threads {
			lo, _ := s.cur.TaskRange(p)
			for ti, t := range s.cur.TasksOf(p) {
				jt := jsonTask{TID: t.TID, Comm: t.Comm, State: string(rune(t.State))}
				if k := lo + ti; k < len(s.rates.Tasks) && !s.rates.Tasks[k].New {
					tr := &s.rates.Tasks[k]
					jt.CPUUser, jt.CPUSys = round2(tr.UserPct), round2(tr.SysPct)
					jt.Vol, jt.Invol = round2(tr.VolPerSec), round2(tr.InvolPerSec)
				}
				jp.Tasks = append(jp.Tasks, jt)
			}
		}
		rec.Processes = append(rec.Processes, jp)
	}
	b, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

func round2(x float64) float64 {
	return float64(int64(x*100+0.5)) / 100
}
