package compare

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"time"
)

// ErrBadInput marks a configuration compare refuses to run; the command
// reports it as a usage error (exit 2).
var ErrBadInput = errors.New("bad input")

// ErrTarget marks a run stopped by its target: a command that exited, a
// process that died, a URL that refused connections. The windows taken
// before are kept in the Result.
var ErrTarget = errors.New("target failed")

// Config is what a comparison was asked to do.
type Config struct {
	// MaxLag is the generator lag p99 above which a load window is
	// dropped as the generator's, not the server's (default 1 ms, as load
	// has it).
	MaxLag time.Duration
	// Sides are the commands (run by /bin/sh -c), the running processes
	// (PID) or a sweep's values (one command, Env set per side). At least
	// two.
	Sides []Side
	// Windows is the number of CPU windows per side (default 10), Window
	// their length (default 10s).
	Windows int
	Window  time.Duration
	// Warmup runs each started process (with the load, if any) before its
	// window (default 2s).
	Warmup time.Duration
	// Keep keeps one process a side for the whole run, the side not being
	// measured paused with SIGSTOP, instead of starting a fresh process for
	// every window (the default). With one
	// process a side no test can tell a difference between the two
	// processes (their memory layout, their phase against the kernel's
	// tick) from one between the programs: an AA run of a ticker with kept
	// processes has been seen to call CPU 4-5% "better" in 9 pairs of 10.
	// Ignored when two servers would share one load URL.
	Keep bool
	// Syscalls is "auto" (count when root and tracefs allow), "on" (fail
	// when they do not) or "off". SyscallWindow is the length of the
	// syscall windows, one after each CPU window (default Window/10).
	Syscalls      string
	SyscallWindow time.Duration
	// Rate and Connections drive each side's URL with the open-loop
	// engine when URLs are set (Side.URL).
	Rate        float64
	Connections int
	// CPUs pins started processes (empty: the CPUs gosleuth may use).
	CPUs []int
	// Seed orders the windows (0: from the clock; the result records it).
	Seed uint64
	// UntilDecided adds windows (one a side at a time, after at least 3 a
	// side) until every metric in Decide is decided, Budget is spent or
	// Windows a side are taken.
	UntilDecided bool
	Budget       time.Duration
	// Decide names the metrics --until-decided waits for (default cpu and
	// wakeups, plus p99 under load).
	Decide []string
	// Sweep names the parameter when the sides are a sweep's values (the
	// report then names the best).
	Sweep string
	// MetricsURLs are Prometheus /metrics URLs per side for GC figures
	// (empty entries: look for the gosleuth agent).
	MetricsURLs []string
	// Stats sets the statistics.
	Stats Options
	// ProcRoot is the procfs mount ("" is /proc).
	ProcRoot string
	// Output receives the commands' output (nil: discarded; the last
	// lines of stderr are kept for error messages).
	Output io.Writer
	// Progress receives one line per window (nil: none).
	Progress io.Writer
	// ReadyTimeout bounds the wait for a started server to accept
	// connections (default 10s).
	ReadyTimeout time.Duration
}

// Protocol records how the windows were taken.
type Protocol struct {
	WindowsPerSide int     `json:"windows_per_side"`
	WindowSeconds  float64 `json:"window_seconds"`
	SyscallSeconds float64 `json:"syscall_window_seconds,omitempty"`
	WarmupSeconds  float64 `json:"warmup_seconds"`
	Order          string  `json:"order"`
	Seed           uint64  `json:"seed"`
	Restart        bool    `json:"restart"`
	// Pinning says how both sides were put on the same CPUs.
	Pinning string `json:"pinning"`
	// Isolation says what the side not measured did meanwhile.
	Isolation string  `json:"isolation"`
	Rate      float64 `json:"rate,omitempty"`
	// Syscalls says how syscalls were counted, or why not.
	Syscalls string `json:"syscalls"`
	// Looks is the number of analyses a sequential run planned.
	Looks int `json:"looks,omitempty"`
	// Sweep is the swept parameter's name.
	Sweep string `json:"sweep,omitempty"`
	// Primary lists the compared metrics that shared PrimaryShare of the
	// significance level in the weighted Holm correction (none: plain
	// Holm).
	Primary      []string `json:"primary,omitempty"`
	PrimaryShare float64  `json:"primary_share,omitempty"`
	// Alpha is the family-wise significance level.
	Alpha float64 `json:"alpha"`
}

// Result is a whole comparison: every window and the statistics.
type Result struct {
	Sides    []Side         `json:"sides"`
	Protocol Protocol       `json:"protocol"`
	Windows  []Window       `json:"windows"`
	Metrics  []MetricResult `json:"metrics"`
	// Sentences say what changed, in plain words.
	Sentences []string `json:"sentences"`
	// Best names a sweep's best value by CPU.
	Best string `json:"best,omitempty"`
	// DecidedAt gives, per metric, the windows a side at which a
	// sequential run first decided it.
	DecidedAt map[string]int `json:"decided_at,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	// Error is why the run stopped early; the windows so far are kept.
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
	// Time says where Seconds went.
	Time TimeSpent `json:"time"`
}

// TimeSpent splits a run's wall time by what it was doing.
type TimeSpent struct {
	// CPUWindows is the time in CPU windows, Dropped the part of it in
	// windows dropped and retaken.
	CPUWindows float64 `json:"cpu_windows_seconds"`
	Dropped    float64 `json:"dropped_seconds"`
	// SyscallWindows includes attaching and releasing the counters (with
	// a fresh process per window, only what of the release outlasted the
	// next process's start and warm-up).
	SyscallWindows float64 `json:"syscall_windows_seconds"`
	// Starts counts started processes; Starting is the time from exec
	// to a process ready to measure, Warmup the warm-ups and the settling
	// after a resume.
	Starts   int     `json:"starts"`
	Starting float64 `json:"starting_seconds"`
	Warmup   float64 `json:"warmup_seconds"`
}

// Worse reports whether any comparison's verdict is worse.
func (r *Result) Worse() bool {
	for _, m := range r.Metrics {
		for _, c := range m.Comparisons {
			if c.Verdict == Worse {
				return true
			}
		}
	}
	return false
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.Windows == 0 {
		d.Windows = 10
	}
	if d.Window == 0 {
		d.Window = 10 * time.Second
	}
	if d.Warmup == 0 {
		d.Warmup = 2 * time.Second
	}
	if d.Syscalls == "" {
		d.Syscalls = "auto"
	}
	if d.SyscallWindow == 0 {
		d.SyscallWindow = d.Window / 10
	}
	if d.Connections == 0 {
		d.Connections = 16
	}
	if d.Budget == 0 {
		d.Budget = 5 * time.Minute
	}
	if d.ReadyTimeout == 0 {
		d.ReadyTimeout = 10 * time.Second
	}
	if d.Seed == 0 {
		d.Seed = uint64(time.Now().UnixNano())
	}
	if len(d.Decide) == 0 {
		d.Decide = []string{"cpu", "wakeups"}
		if d.loaded() {
			d.Decide = append(d.Decide, "p99")
		}
	}
	if d.Stats.Primary == nil {
		// The metrics that decide are the primary family of the weighted
		// Holm correction; CPU per request goes with CPU (under a fixed
		// rate it is CPU in other units, and the one to read when the
		// rates differ).
		d.Stats.Primary = slices.Clone(d.Decide)
		if slices.Contains(d.Decide, "cpu") && d.loaded() {
			d.Stats.Primary = append(d.Stats.Primary, "cpu_per_1k")
		}
	}
	d.Stats = d.Stats.withDefaults()
	return d
}

func (c *Config) loaded() bool {
	return len(c.Sides) > 0 && c.Sides[0].URL != ""
}

// Validate checks a configuration before any process starts.
func (c *Config) Validate() error {
	if len(c.Sides) < 2 {
		return fmt.Errorf("%w: need at least two sides to compare", ErrBadInput)
	}
	for _, s := range c.Sides {
		if (s.Command == "") == (s.PID == 0) {
			return fmt.Errorf("%w: side %s needs a command or a PID", ErrBadInput, s.Name)
		}
		if (s.URL == "") != (c.Sides[0].URL == "") {
			return fmt.Errorf("%w: either every side is under load or none", ErrBadInput)
		}
		if s.URL != "" {
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%w: load URL %q: want http://HOST:PORT/PATH", ErrBadInput, s.URL)
			}
		}
	}
	min := 2
	if c.UntilDecided {
		min = 3
	}
	switch {
	case c.Windows != 0 && c.Windows < min:
		return fmt.Errorf("%w: --windows %d: at least %d a side (rank tests decide nothing below 6 a side; 10 is the default)", ErrBadInput, c.Windows, min)
	case c.Window != 0 && c.Window < 100*time.Millisecond:
		return fmt.Errorf("%w: --window %s: at least 100ms", ErrBadInput, c.Window)
	case c.Warmup < 0:
		return fmt.Errorf("%w: --warmup must not be negative", ErrBadInput)
	case c.SyscallWindow < 0:
		return fmt.Errorf("%w: --syscall-window must not be negative", ErrBadInput)
	case c.loaded() && !(c.Rate > 0):
		return fmt.Errorf("%w: --load needs --rate (requests per second)", ErrBadInput)
	case !c.loaded() && c.Rate > 0:
		return fmt.Errorf("%w: --rate needs --load URL", ErrBadInput)
	}
	switch c.Syscalls {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("%w: --syscalls must be auto, on or off, got %q", ErrBadInput, c.Syscalls)
	}
	if c.Stats.Noise < 0 || c.Stats.Noise >= 1 {
		return fmt.Errorf("%w: --noise must be in [0, 1)", ErrBadInput)
	}
	if c.Stats.PrimaryShare < 0 || c.Stats.PrimaryShare > 1 {
		return fmt.Errorf("%w: the primary metrics' share of alpha must be in [0, 1]", ErrBadInput)
	}
	if c.Stats.Alpha < 0 || c.Stats.Alpha >= 0.5 {
		return fmt.Errorf("%w: --alpha must be in (0, 0.5)", ErrBadInput)
	}
	return nil
}

// plannedLooks is the most analyses a sequential run (--until-decided) can
// make, so that each may be held to Alpha over that many (Bonferroni over
// the looks): the first after 3 rounds (a window of every side each), then
// one after every round, until a side has maxPerSide windows or the next
// round, reckoned at a CPU and a syscall window a side, could overrun the
// budget. A round takes at least a CPU window a side (its syscall windows
// may not be taken), so after round r at least r x sides x window is
// spent, and round r+1 starts only if sides x (window + sysWindow) more
// fit in the budget. Counting more looks than can happen would only cost
// power; the earlier count, 1 + budget/(sides x (window + sysWindow +
// 0.5 s)), ignored the cap a side and held the default run (10 s windows,
// 5 minutes, at most 10 a side) to 0.05/14 where 8 looks can happen.
func plannedLooks(sides, maxPerSide int, window, sysWindow, budget time.Duration) int {
	rounds := maxPerSide
	if window > 0 && sides > 0 {
		n := time.Duration(sides)
		rounds = min(rounds, 1+int(max(budget-n*(window+sysWindow), 0)/(n*window)))
	}
	return max(rounds, 3) - 2
}

// schedule orders perSide windows of each of n sides in randomized blocks:
// for two sides ABBA or BAAB by a coin; for more, a random permutation and
// its reverse. An odd count ends with one shuffled round.
func schedule(n, perSide int, rng *rand.Rand) []int {
	var out []int
	for k := 0; k+2 <= perSide; k += 2 {
		p := rng.Perm(n)
		out = append(out, p...)
		slices.Reverse(p)
		out = append(out, p...)
	}
	if perSide%2 == 1 {
		out = append(out, rng.Perm(n)...)
	}
	return out
}

// orderString writes a schedule: two sides by their names' first letters
// ("ABBA"), unless those are the same (a sweep's "GOMAXPROCS=1" and
// "GOMAXPROCS=2"), and otherwise by their numbers in the list of sides
// ("1 2 2 1").
func orderString(sides []Side, order []int) string {
	var b strings.Builder
	letters := len(sides) == 2 && sides[0].Name != "" && sides[1].Name != "" && sides[0].Name[0] != sides[1].Name[0]
	for _, s := range order {
		if letters {
			b.WriteString(sides[s].Name[:1])
			continue
		}
		fmt.Fprintf(&b, "%d", s+1)
		b.WriteByte(' ')
	}
	return strings.TrimSpace(b.String())
}

// metricsFor lists the metrics the windows have values for on every side,
// in table order: CPU windows first, then syscalls by their rate.
// MetricsOf lists the metrics the analysis compares for these windows of
// nsides sides, as this version of compare defines them (a saved Result
// carries the definitions of the version that wrote it).
func MetricsOf(windows []Window, nsides int) []Metric {
	return metricsFor(windows, nsides)
}

func metricsFor(windows []Window, nsides int) []Metric {
	fixed := []Metric{metricCPU, metricUser, metricSys, metricCPUPerK, metricWakeups, metricInvol,
		metricThreads, metricRSS, metricP50, metricP99, metricP999, metricGC, metricGCShare, metricGoroutines, metricGoCreated, metricSyscalls}
	has := func(name string) bool {
		seen := make([]bool, nsides)
		for _, w := range windows {
			if v, ok := w.Values[name]; ok && !w.Dropped && v == v {
				seen[w.Side] = true
			}
		}
		return !slices.Contains(seen, false)
	}
	var out []Metric
	for _, m := range fixed {
		if has(m.Name) {
			out = append(out, m)
		}
	}
	// Syscalls by kind: those above 1/s on some side, the busiest first,
	// at most topSyscalls (each is one more test in Holm's family).
	type kv struct {
		name string
		rate float64
	}
	rates := map[string][]float64{}
	for _, w := range windows {
		if w.Kind != kindSyscalls || w.Dropped {
			continue
		}
		for k, v := range w.Values {
			if strings.HasPrefix(k, "syscall.") {
				rates[k] = append(rates[k], v)
			}
		}
	}
	var kinds []kv
	for k, v := range rates {
		if med := median(sorted(v)); med >= 1 && has(k) {
			kinds = append(kinds, kv{k, med})
		}
	}
	slices.SortFunc(kinds, func(a, b kv) int {
		if a.rate != b.rate {
			if a.rate > b.rate {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	for i, k := range kinds {
		if i == topSyscalls {
			break
		}
		out = append(out, syscallMetric(strings.TrimPrefix(k.name, "syscall.")))
	}
	return out
}

// topSyscalls bounds the syscall kinds compared.
const topSyscalls = 6

// finish computes the statistics and sentences of r from its windows.
func (r *Result) finish(opts Options) {
	flagOutliers(r.Windows, metricsFor(r.Windows, len(r.Sides)), len(r.Sides))
	ms := metricsFor(r.Windows, len(r.Sides))
	r.Metrics = Analyze(r.Sides, r.Windows, ms, opts)
	opts = opts.withDefaults()
	r.Protocol.Alpha = opts.Alpha
	r.Protocol.Primary, r.Protocol.PrimaryShare = nil, 0
	for _, m := range r.Metrics {
		if slices.Contains(opts.Primary, m.Metric.Name) && len(m.Comparisons) > 0 && !math.IsNaN(m.Comparisons[0].PAdj) {
			r.Protocol.Primary = append(r.Protocol.Primary, m.Metric.Name)
		}
	}
	if len(r.Protocol.Primary) > 0 {
		r.Protocol.PrimaryShare = opts.PrimaryShare
	}
	r.Sentences = Sentences(r.Sides, r.Metrics)
	if r.Protocol.Sweep != "" || len(r.Sides) > 2 {
		if _, note, ok := Best(r.Sides, r.Metrics, "cpu"); ok {
			r.Best = note
		}
	}
	var out []string
	for _, w := range r.Windows {
		if len(w.Outliers) > 0 {
			out = append(out, fmt.Sprintf("window %d (%s) is an outlier of its side for %s (kept)",
				w.Index+1, r.Sides[w.Side].Name, strings.Join(w.Outliers, ", ")))
		}
	}
	for _, w := range r.Windows {
		if w.Dropped {
			out = append(out, fmt.Sprintf("window %d (%s) dropped: %s", w.Index+1, r.Sides[w.Side].Name, w.Why))
		}
	}
	r.Notes = append(r.Notes, out...)
}
