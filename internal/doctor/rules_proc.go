package doctor

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/window"
)

// Thresholds of the /proc-decidable rules. They are relative (per second,
// per wake-up, per CPU-second, against the process's own limits) so that a
// rule means the same on a 2-core VM and a 96-core host. Calibrated on the
// patients and controls under testdata/patients (see doctor_test.go).
const (
	// A process waking this often while doing little I/O has a timer or
	// sleep loop. A 10 ms ticker wakes ~100-200 times a second in Go.
	idleWakeupsInfo = 100.0
	idleWakeupsWarn = 500.0
	// "Doing little": fewer read/write-class syscalls than this per wake-up.
	// A busy HTTP server does ~1.5 per wake-up; a ticker loop ~0, but in a
	// process with a listener (any server, or the agent) a timer that
	// fires while a thread waits in epoll pokes the netpoller through an
	// eventfd, a write and a read: 0.33 per wake-up on a 1 ms ticker
	// serving the agent, which 0.2 took for work.
	idleIOPerWakeup = 0.5
	// CPU per wake-up below this (seconds) means the wake-ups find nothing
	// to do (a ticker costs ~10-20 us here, a CPU-bound worker 65 us). On a
	// many-core host spinning Ms raise a ticker's cost per wake-up, but that
	// cost is kernel time (futex), so a kernel share of CPU at least
	// idleSysShare also counts as idle.
	idleCPUPerWakeup = 50e-6
	idleSysShare     = 0.5
	// Without io counters: a stricter bound on CPU per wake-up.
	idleCPUPerWakeupNoIO = 20e-6
	// With stack samples: the program's own code at most this share. A
	// timer loop's ticks run almost no user code (0-5% of its few samples);
	// eight goroutines handing a mutex over spent 31% in user code.
	idleUserCodeShare = 0.2
	// With syscall counts: Go waits for its next timer in the netpoller
	// (epoll_pwait with a timeout), so a timer loop returns from epoll
	// about every other wake-up (0.4 per wake-up measured on 1 ms tickers,
	// sleep loops and AfterFunc). Wake-ups that are goroutines handed over
	// through futex (a mutex, a channel) without epoll are not timers.
	idleEpollPerWakeup = 0.1

	// Kernel time: report when the process uses at least this much of a
	// core and the kernel's share of its CPU is at least kernelShareInfo.
	kernelMinCores  = 0.05
	kernelShareInfo = 0.5
	// Without syscall counts, the kernel stack samples decide instead: the
	// data-less syscalls' share of the kernel samples (lower confidence:
	// shares of time, not counts of calls).
	kernelChurnSampleShare = 0.6
	// Warn when syscalls that move no data make up this share of calls and
	// the kernel time is at least kernelChurnCores.
	kernelChurnWarn  = 0.6
	kernelChurnCores = 0.05

	// Exec: children's CPU in cores, or child processes per second.
	execChildCores     = 0.01
	execChildCoresWarn = 0.02
	execPerSecInfo     = 1.0
	execPerSecWarn     = 10.0
	// Share of /proc readings in which the children's CPU grew.
	execSteadyShare = 0.5

	// Descriptor limit: share of the soft limit in use.
	fdLimitWarn     = 0.8
	fdLimitCritical = 0.95

	// Leak slopes need a good linear fit and a real rise.
	slopeMinR2 = 0.8
	// RSS growth alone is a warning only when the window is long enough to
	// tell a leak from warm-up, or when RSS would double within
	// memDoublingWarn seconds (out of memory within minutes whatever the
	// cause). Warm-up under new load: etcd taking writes grew 0.7-1.3 MB/s
	// from 32-44 MB over 8 s (doubling in 34-44 s), a cache server 0.9 MB/s
	// from 10 MB (11.5 s); the memgrow patient doubles in 1-2 s.
	memGrowthWarnWindow = 30.0
	memDoublingWarn     = 5.0
	fdLeakMinRise       = 10
	memGrowthMinPct     = 0.10
	memGrowthMinMB      = 4.0

	// Threads beyond threadFactor x GOMAXPROCS + threadSlack are more than
	// the Go scheduler needs: blocking syscalls or cgo calls hold them.
	threadFactor = 3
	threadSlack  = 16

	// A process with at least this share of its stack samples, and
	// servingMinSamples of them, on a server's request path served
	// requests in the window: kernel time and file reading that follow
	// the load are the requests' own work, not a loop of the program's.
	servingMinShare   = 0.02
	servingMinSamples = 3
)

// serving returns the share of stack samples on a server's request path,
// and whether it is enough to say the process served requests.
func serving(w *Window) (float64, bool) {
	st := w.Stacks
	if st == nil || st.Samples == 0 {
		return 0, false
	}
	return st.Serving, st.Serving >= servingMinShare && st.Serving*float64(st.Samples) >= servingMinSamples
}

func init() {
	register(&Rule{ID: "idle-wakeups", Summary: "timer or sleep loops waking a process that has nothing to do", Check: checkIdleWakeups})
	register(&Rule{ID: "kernel-time", Summary: "a large share of CPU in the kernel, which Go's pprof does not break down", Check: checkKernelTime, Symptom: true})
	register(&Rule{ID: "file-reopen-churn", Summary: "the same files opened and closed over and over", Missing: needSyscallsOrStacks, Check: checkReopen})
	register(&Rule{ID: "exec-hot-path", Summary: "child processes started at a high rate", Check: checkExec})
	register(&Rule{ID: "fd-limit", Summary: "open descriptors near the process's own soft limit", Missing: needFDs, Check: checkFDLimit})
	register(&Rule{ID: "fd-leak", Summary: "open descriptors rising steadily", Missing: needFDs, Check: checkFDLeak})
	register(&Rule{ID: "memory-growth", Summary: "resident memory rising steadily", Check: checkMemoryGrowth, Symptom: true})
	register(&Rule{ID: "thread-explosion", Summary: "OS threads far above GOMAXPROCS", Check: checkThreads})
	register(&Rule{ID: "gomaxprocs-oversized", Summary: "GOMAXPROCS above the CPUs the process may use, or far above what it uses", Check: checkGOMAXPROCS})
}

func needSyscallsOrStacks(w *Window) string {
	if w.Syscalls != nil || w.Stacks != nil {
		return ""
	}
	return "needs exact syscall counts or kernel stack samples: run as root (or with CAP_PERFMON and tracefs access)"
}

func needFDs(w *Window) string {
	if w.FDsKnown {
		return ""
	}
	return "cannot read /proc/PID/fd: run as the process's user or root"
}

func pct(f float64) float64 { return round(100*f, 1) }

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// timerSyscalls are what Go's runtime calls to park and wake threads.
var timerSyscalls = []string{"futex", "epoll_pwait", "epoll_pwait2", "epoll_wait", "nanosleep", "clock_nanosleep"}

func checkIdleWakeups(w *Window, h *Host) *Finding {
	wps := w.WakeupsPerSec()
	if wps < idleWakeupsInfo || w.VolCtxsw == 0 {
		return nil
	}
	cpuPerWake := w.CPUSec() / float64(w.VolCtxsw)
	ev := EvidenceList{
		{"wakeups_per_s", round(wps, 0), "/s"},
		{"cpu_pct", pct(w.Cores()), "% of a core"},
		{"cpu_us_per_wakeup", round(cpuPerWake*1e6, 1), "us"},
	}
	confidence := "medium"
	if w.IOCalls >= 0 {
		ioPerWake := float64(w.IOCalls) / float64(w.VolCtxsw)
		if ioPerWake >= idleIOPerWakeup {
			return nil // the wake-ups do I/O: this is work, not a timer loop
		}
		ev = append(ev, Evidence{"io_syscalls_per_wakeup", round(ioPerWake, 3), ""})
	} else {
		confidence = "low"
	}
	// The wake-ups must find little to compute, too. Without io counters a
	// busy server (~35 us per wake-up) looks like this too, so be strict.
	if w.IOCalls < 0 {
		if cpuPerWake >= idleCPUPerWakeupNoIO {
			return nil
		}
	} else if cpuPerWake >= idleCPUPerWakeup && w.SysSec < idleSysShare*w.CPUSec() {
		return nil
	}
	if s, ok := classShare(w, ClassUserCode); ok {
		if s > idleUserCodeShare {
			return nil // the wake-ups run the program's code: work, not idling
		}
		ev = append(ev, Evidence{"user_code_share_pct", pct(s), "% of samples"})
	}
	sources := []Source{SourceProc}
	if rate, ok := w.Syscalls.Rate(timerSyscalls...); ok {
		epoll, _ := w.Syscalls.Rate("epoll_pwait", "epoll_pwait2", "epoll_wait")
		if epoll < idleEpollPerWakeup*wps {
			// Handed over through futex, not woken by a timer.
			return nil
		}
		total := float64(w.Syscalls.Total()) / w.Syscalls.Seconds
		ev = append(ev, Evidence{"timer_syscalls_per_s", round(rate, 0), "/s"}, Evidence{"netpoll_waits_per_wakeup", round(epoll/wps, 2), ""})
		if total > 0 && rate/total < 0.5 {
			confidence = "low"
		} else {
			confidence = "high"
		}
		for _, n := range []string{"futex", "epoll_pwait", "nanosleep"} {
			if r, _ := w.Syscalls.Rate(n); r > 0 {
				ev = append(ev, Evidence{n + "_per_s", round(r, 0), "/s"})
			}
		}
		sources = append(sources, SourceSyscalls)
	}
	code, probed, rate := probeCode(w, probeTimers, 0.2*wps/2, "arms a timer or sleeps")
	if len(code) == 0 {
		code, probed, rate = probeCode(w, probeWaits, 0.2*wps/2, "waits for the tick")
	}
	// The loop's own duration: time.Sleep's d, or the d a Timer is
	// re-armed with each round.
	var loopD float64
	if probed != "" {
		ev = append(ev, Evidence{"probed_" + probed + "_per_s", round(rate, 0), "/s"})
		if a, ok := probeArg(w, probed); ok && a.Value > 0 && a.Value < 1<<62 {
			switch probed {
			case "time.Sleep":
				loopD = float64(a.Value) / 1e9
				ev = append(ev, Evidence{"sleep_ms", round(loopD*1e3, 3), "ms"})
			case "time.(*Timer).Reset":
				loopD = float64(a.Value) / 1e9
				ev = append(ev, Evidence{"timer_reset_ms", round(loopD*1e3, 3), "ms"})
			}
		}
	} else {
		code = codeAt(w, "timer", "waits on a timer or sleeps")
	}
	sources = codeSources(sources, code)
	sev := Info
	if wps >= idleWakeupsWarn {
		sev = Warn
	}
	// A Go timer firing every P seconds costs about two switches per tick
	// (the thread that sleeps in netpoll and the one that runs the timer).
	period := 2 / wps
	if !w.IsGo() {
		period = 1 / wps
	}
	if loopD > 0 {
		period = loopD // the loop's own argument, not an estimate
	} else {
		ev = append(ev, Evidence{"estimated_period_ms", round(period*1e3, 2), "ms"})
	}
	ev = append(ev, Evidence{"cores_per_1000_processes", round(w.Cores()*1000, 1), "cores"})
	f := &Finding{
		Severity:   sev,
		Title:      fmt.Sprintf("wakes %.0f times a second with almost nothing to do", wps),
		Observed:   fmt.Sprintf("wakes %.0f times a second at %.0f us of CPU each", wps, cpuPerWake*1e6),
		Evidence:   ev,
		Sources:    sources,
		Confidence: confidence,
		Cores:      w.Cores(),
		Code:       code,
	}
	if w.IsGo() {
		f.Cause = fmt.Sprintf("A short-period timer or sleep loop (about every %.2g ms). In Go each tick parks and wakes an OS thread (futex, epoll_pwait), so the cost grows with GOMAXPROCS: a 1 ms ticker burned 15-30%% of a core on many-core hosts.", period*1e3)
		f.Fix = "Make the period coarser, or drop the loop: read time.Now() where the value is needed (vDSO, ~20 ns) instead of caching a clock every millisecond; stop tickers (ticker.Stop) when idle; use time.AfterFunc or a timer reset on demand."
	} else {
		f.Cause = fmt.Sprintf("A short-period timer or polling loop (about every %.2g ms) wakes the process with nothing to do.", period*1e3)
		f.Fix = "Make the period coarser or wait on an event (epoll, futex, a condition variable) instead of polling."
	}
	if len(code) == 0 && w.IsGo() {
		f.Cause += " " + noCodeWhy(w, "the timer")
	}
	return f
}

// churnSyscalls move no data: parking and waking threads, sleeping, file
// and descriptor churn, memory map churn, signal set-up for exec.
var churnSyscalls = []string{"futex", "sched_yield", "nanosleep", "clock_nanosleep", "open", "openat", "openat2", "close",
	"fcntl", "fstat", "newfstatat", "statx", "epoll_ctl", "mmap", "munmap", "madvise", "rt_sigaction", "rt_sigprocmask", "getpid", "tgkill"}

func checkKernelTime(w *Window, h *Host) *Finding {
	cores := w.Cores()
	if cores < kernelMinCores || w.CPUSec() <= 0 {
		return nil
	}
	share := w.SysSec / w.CPUSec()
	if share < kernelShareInfo {
		return nil
	}
	ev := EvidenceList{
		{"sys_share_pct", pct(share), "%"},
		{"user_pct", pct(w.UserSec / w.Seconds()), "% of a core"},
		{"sys_pct", pct(w.SysSec / w.Seconds()), "% of a core"},
	}
	sources := []Source{SourceProc}
	sev := Info
	confidence := "medium"
	cause := fmt.Sprintf("%.0f%% of this process's CPU is spent in the kernel, where Go's pprof sees only the syscall entry, not why it is slow.", 100*share)
	churnMsg := " Most syscalls move no data (%s): the kernel time goes to parking and waking threads, timers, or opening and closing files."
	var code []CodeRef
	if w.Syscalls != nil && w.Syscalls.Total() > 0 {
		total := float64(w.Syscalls.Total())
		churn, _ := w.Syscalls.Rate(churnSyscalls...)
		churnShare := churn * w.Syscalls.Seconds / total
		top := topSyscalls(w.Syscalls, 3)
		ev = append(ev, Evidence{"top_syscalls", top, ""}, Evidence{"churn_syscall_share_pct", pct(churnShare), "%"})
		sources = append(sources, SourceSyscalls)
		confidence = "high"
		if churnShare >= kernelChurnWarn && w.SysSec/w.Seconds() >= kernelChurnCores {
			sev = Warn
			cause += fmt.Sprintf(churnMsg, top)
		} else {
			cause += " The syscalls are mostly I/O (" + top + "): expected for a network or disk bound program."
		}
	} else if churnShare, top, ok := kernelChurnFromStacks(w); ok {
		// No syscall counts (no tracefs, no permission): the kernel's own
		// stacks say where its time goes, as shares of time, not calls.
		ev = append(ev, Evidence{"churn_kernel_sample_share_pct", pct(churnShare), "% of kernel samples"})
		sources = append(sources, SourceStacks)
		confidence = "low"
		if churnShare >= kernelChurnSampleShare && w.SysSec/w.Seconds() >= kernelChurnCores {
			sev = Warn
			cause += fmt.Sprintf(churnMsg, top) + " (decided from kernel stack samples: syscalls could not be counted)"
			code = kernelCode(w, churnSyscalls)
		}
	}
	if sv, ok := serving(w); ok && sev == Warn {
		// A server's threads park and wake, and it polls and writes, for
		// every request: without a cause found, that is the cost of
		// serving (etcd answering /health 200 times a second: futex,
		// nanosleep and epoll 79% of its syscalls), not a defect.
		sev = Info
		ev = append(ev, Evidence{"serving_share_pct", pct(sv), "% of samples on the request path"})
		cause += fmt.Sprintf(" It is serving requests (%.0f%% of its samples on a server's request path), and parking, waking and polling threads per request is how a Go server works: information unless a cause is found.", 100*sv)
	}
	if w.Stacks != nil && len(w.Stacks.KernelPaths) > 0 {
		ev = append(ev, Evidence{"kernel_paths", joinShares(w.Stacks.KernelPaths, 3), ""})
		if c := w.Stacks.Callers["kernel"]; len(c) > 0 {
			ev = append(ev, Evidence{"go_callers", joinShares(c, 3), ""})
		}
		if !slices.Contains(sources, SourceStacks) {
			sources = append(sources, SourceStacks)
		}
	}
	return &Finding{
		Severity:   sev,
		Title:      fmt.Sprintf("%.0f%% of CPU is in the kernel: invisible to pprof", 100*share),
		Observed:   fmt.Sprintf("%.0f%% of its CPU in the kernel (%.1f%% of a core)", 100*share, 100*w.SysSec/w.Seconds()),
		Evidence:   ev,
		Cause:      cause,
		Fix:        "Profile with kernel stacks (gosleuth profile --pid PID) to see which kernel paths and which Go callers; then batch small reads and writes, keep files open (pread), and cut thread park/wake churn (fewer timers, smaller GOMAXPROCS).",
		Sources:    sources,
		Confidence: confidence,
		Cores:      w.SysSec / w.Seconds(),
		Code:       code,
	}
}

// kernelChurnFromStacks returns the share of kernel stack samples in
// syscalls that move no data, the top kernel paths, and false when there
// are too few kernel samples to tell.
func kernelChurnFromStacks(w *Window) (share float64, top string, ok bool) {
	st := w.Stacks
	if st == nil || st.Samples < minSamples || st.KernelShare*float64(st.Samples) < minSiteSamples {
		return 0, "", false
	}
	churn := 0.0
	for _, p := range st.KernelPaths {
		if name, ok := strings.CutPrefix(p.Name, "syscall "); ok && slices.Contains(churnSyscalls, name) {
			churn += p.Share
		}
	}
	return churn / st.KernelShare, joinShares(st.KernelPaths, 3), true
}

// kernelCode names the code behind the kernel samples of the given
// syscalls.
func kernelCode(w *Window, names []string) []CodeRef {
	var out []CodeRef
	for _, n := range names {
		out = append(out, codeAt(w, "syscall "+n, "calls "+n)...)
	}
	slices.SortStableFunc(out, func(a, b CodeRef) int { return cmp.Compare(b.Share, a.Share) })
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

// topSyscalls names the n most frequent syscalls with their shares, and
// after them up to n more whose count equals the n-th's: a cut between
// equal counts would leave one out as if it were rarer (a server's
// openat, tied with close, fstat and epoll_ctl, was the one dropped from
// five).
func topSyscalls(s *Syscalls, n int) string {
	shares := make([]Share, 0, len(s.Counts))
	total := float64(s.Total())
	for name, c := range s.Counts {
		shares = append(shares, Share{Name: name, Share: float64(c) / total})
	}
	window.SortShares(shares)
	k := min(n, len(shares))
	for k > 0 && k < len(shares) && k < 2*n && shares[k].Share == shares[k-1].Share {
		k++
	}
	return joinShares(shares, k)
}

func joinShares(s []Share, n int) string {
	var b strings.Builder
	for i, x := range s {
		if i == n {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f%%", x.Name, 100*x.Share)
	}
	return b.String()
}

func checkExec(w *Window, h *Host) *Finding {
	sec := w.Seconds()
	childCores := perSec(w.ChildUserSec+w.ChildSysSec, sec)
	spawned := perSec(float64(w.ChildrenSeen), sec)
	sources := []Source{SourceProc}
	counted := false // spawned is the rate of reaping calls, not of children seen
	if r, ok := w.Syscalls.Rate("wait4", "waitid"); ok && r > spawned {
		spawned, counted = r, true
		sources = append(sources, SourceSyscalls)
	}
	// Without a count of children (short-lived ones are rarely caught in a
	// /proc reading), children's CPU growing in most readings means a steady
	// stream of reaped children; one long child finishing is not a hot path.
	steady := w.ReapShare >= execSteadyShare && childCores >= execChildCores
	if spawned < execPerSecInfo && !steady {
		return nil
	}
	ev := EvidenceList{
		{"children_per_s", round(spawned, 1), "/s"},
		{"readings_with_reaped_children_pct", pct(w.ReapShare), "%"},
		{"children_cpu_pct", pct(childCores), "% of a core"},
		{"own_cpu_pct", pct(w.Cores()), "% of a core"},
	}
	if r, ok := w.Syscalls.Rate("rt_sigaction"); ok && r > 0 {
		ev = append(ev, Evidence{"rt_sigaction_per_s", round(r, 0), "/s"})
	}
	sev := Info
	if spawned >= execPerSecWarn || childCores >= execChildCoresWarn {
		sev = Warn
	}
	code := codeFrom(w, "exec", probeExec, "starts a process")
	sources = codeSources(sources, code)
	title := fmt.Sprintf("starts %.1f child processes a second", spawned)
	switch {
	case spawned < execPerSecInfo:
		title = fmt.Sprintf("children started and reaped all the time use %.1f%% of a core", 100*childCores)
	case !counted:
		// Counted from /proc readings alone: a child that lives less
		// than an interval is rarely in one, so the count is a floor
		// (50 shells starting 100 children a second each showed 1.4).
		title = fmt.Sprintf("starts at least %.1f child processes a second", spawned)
		if steady {
			title = fmt.Sprintf("children started and reaped all the time use %.1f%% of a core (at least %.1f a second)", 100*childCores, spawned)
		}
	}
	return &Finding{
		Severity:   sev,
		Title:      title,
		Evidence:   ev,
		Cause:      "A program is executed on a hot path (for example exec.Command(\"uuidgen\") per request). Each exec costs a fork, an exec, dynamic loading and a wait, and the children's CPU is not in the parent's profile.",
		Fix:        "Do the work in process with a library (github.com/google/uuid instead of uuidgen), or keep one long-lived helper process and talk to it over a pipe.",
		Sources:    sources,
		Confidence: "medium",
		Cores:      childCores,
		Code:       code,
	}
}

func maxFDs(w *Window) int32 {
	var m int32
	for _, p := range w.Series {
		m = max(m, p.FDs)
	}
	return m
}

func checkFDLimit(w *Window, h *Host) *Finding {
	if w.FDLimit <= 0 {
		return nil
	}
	fds := maxFDs(w)
	use := float64(fds) / float64(w.FDLimit)
	if use < fdLimitWarn {
		return nil
	}
	sev := Warn
	if use >= fdLimitCritical {
		sev = Critical
	}
	return &Finding{
		Severity: sev,
		Title:    fmt.Sprintf("%d open descriptors of a %d limit (%.0f%%)", fds, w.FDLimit, 100*use),
		Evidence: EvidenceList{{"fds", fds, ""}, {"soft_limit", w.FDLimit, ""}, {"use_pct", pct(use), "%"}},
		Cause:    "The process is close to its own RLIMIT_NOFILE: the next accept or open fails with EMFILE (\"too many open files\").",
		Fix:      "Find what holds the descriptors (ls -l /proc/PID/fd); if they are legitimate, raise the soft limit (LimitNOFILE= in systemd, ulimit -n; Go 1.19+ raises its soft limit to the hard limit at start unless something lowered the hard limit).",
		Sources:  []Source{SourceProc},
		// A level, not a trend: high confidence in the numbers.
		Confidence: "high",
	}
}

func series(w *Window, f func(Point) float64) (ts, ys []float64) {
	for _, p := range w.Series {
		ts = append(ts, p.T)
		ys = append(ys, f(p))
	}
	return ts, ys
}

func checkFDLeak(w *Window, h *Host) *Finding {
	if len(w.Series) < 3 {
		return nil
	}
	ts, ys := series(w, func(p Point) float64 { return float64(p.FDs) })
	b, r2 := slope(ts, ys)
	rise := ys[len(ys)-1] - ys[0]
	if rise < fdLeakMinRise || b <= 0 || r2 < slopeMinR2 {
		return nil
	}
	ev := EvidenceList{
		{"fds_start", ys[0], ""}, {"fds_end", ys[len(ys)-1], ""},
		{"per_s", round(b, 2), "/s"}, {"fit_r2", round(r2, 2), ""},
	}
	sev := Warn
	title := fmt.Sprintf("open descriptors rise by %.1f a second", b)
	if w.FDLimit > 0 {
		left := (float64(w.FDLimit) - ys[len(ys)-1]) / b
		ev = append(ev, Evidence{"hours_to_limit", round(left/3600, 2), "h"})
		if left < 3600 {
			sev = Critical
			title += fmt.Sprintf(": the limit is reached in %.0f minutes", left/60)
		}
	}
	return &Finding{
		Severity:   sev,
		Title:      title,
		Evidence:   ev,
		Cause:      "Descriptors are opened and not closed: a response body not closed (resp.Body.Close), files or connections dropped without Close, or a connection pool without a bound.",
		Fix:        "List them (ls -l /proc/PID/fd: sockets, files, pipes) to see which kind grows; close on every path (defer f.Close() right after the error check); bound pools.",
		Sources:    []Source{SourceProc},
		Confidence: "medium",
	}
}

func checkMemoryGrowth(w *Window, h *Host) *Finding {
	if len(w.Series) < 3 {
		return nil
	}
	ts, ys := series(w, func(p Point) float64 { return float64(p.RSS) / (1 << 20) })
	b, r2 := slope(ts, ys)
	first, last := ys[0], ys[len(ys)-1]
	if b <= 0 || r2 < slopeMinR2 || last-first < memGrowthMinMB || first <= 0 || (last-first)/first < memGrowthMinPct {
		return nil
	}
	// Warm-up (a heap growing to its working size) flattens; a leak keeps
	// its pace. Ask the second half of the window for at least half the
	// slope.
	half := len(ts) / 2
	if b2, _ := slope(ts[half:], ys[half:]); len(ts)-half >= 3 && b2 < 0.5*b {
		return nil
	}
	ev := EvidenceList{
		{"rss_start_mb", round(first, 1), "MB"}, {"rss_end_mb", round(last, 1), "MB"},
		{"mb_per_s", round(b, 2), "MB/s"}, {"fit_r2", round(r2, 2), ""},
	}
	sources := []Source{SourceProc}
	cause := "Resident memory rose steadily through the window: a cache without a bound, a leak (goroutines, maps that only grow), or a heap still warming up."
	sev := Info
	doubling := first / b
	ev = append(ev, Evidence{"doubling_s", round(doubling, 1), "s"})
	if w.Runtime != nil && !math.IsNaN(w.Runtime.HeapLive) {
		ev = append(ev, Evidence{"heap_live_mb", round(w.Runtime.HeapLive/(1<<20), 1), "MB"})
		sources = append(sources, SourceRuntime)
	}
	if w.Seconds() >= memGrowthWarnWindow || doubling < memDoublingWarn {
		sev = Warn
	}
	if headroom, why := gcHeadroom(w, (last-first)*(1<<20), last*(1<<20)); headroom {
		sev, cause = Info, why
		sources = append(sources, SourceRuntime)
	}
	return &Finding{
		Severity:   sev,
		Title:      fmt.Sprintf("RSS grows %.1f MB a second (%.0f -> %.0f MB)", b, first, last),
		Observed:   fmt.Sprintf("RSS grows %.1f MB a second (%.0f -> %.0f MB)", b, first, last),
		Evidence:   ev,
		Cause:      cause,
		Fix:        "Watch over a longer window (gosleuth top --pid PID) to tell warm-up from a leak; take two heap profiles a minute apart and compare them (go tool pprof -base); bound caches; set GOMEMLIMIT.",
		Sources:    sources,
		Confidence: "medium",
	}
}

// RSS growth the GC's headroom explains: the live heap and the stacks
// grew by less than memRetainedShare of the RSS growth across at least
// two cycles, and RSS stays within memGoalSlack of the heap goal plus the
// stacks (and memGoalSlackMB for the runtime's own and the binary's
// memory). A program whose live heap holds steady fills the room GOGC
// gives it above that heap before its first cycles at full speed (a
// patient building a 28 MB live set went from 35 to 70 MB of RSS, its
// goal 55 MB), which is not a leak; a leak grows the live heap from cycle
// to cycle, and memory outside the Go heap (cgo, mmap) takes RSS past
// what the goal explains.
const (
	memRetainedShare = 0.25
	memGoalSlack     = 1.25
	memGoalSlackMB   = 32
)

// gcHeadroom reports whether a window's RSS growth (grew bytes, to rss
// bytes) is the GC's headroom filling rather than memory retained, with
// the cause to give, from the runtime's books.
func gcHeadroom(w *Window, grew, rss float64) (bool, string) {
	b := books(w)
	if b == nil || b.End.Cycles < b.Start.Cycles+2 || b.End.HeapGoal == 0 {
		return false, ""
	}
	s, e := b.Start, b.End
	retained := float64(e.HeapMarked) - float64(s.HeapMarked) + float64(e.StackInUse) - float64(s.StackInUse)
	room := memGoalSlack*float64(e.HeapGoal+e.StackInUse) + memGoalSlackMB*(1<<20)
	if retained >= memRetainedShare*grew || rss > room {
		return false, ""
	}
	return true, fmt.Sprintf("The live heap held steady (%.0f MB marked at the start, %.0f MB at the end, over %d GC cycles): RSS grows as the heap fills the room the GC leaves above it before each cycle (the goal is %.0f MB), which is warm-up, not memory kept.",
		mb(s.HeapMarked), mb(e.HeapMarked), e.Cycles-s.Cycles, mb(e.HeapGoal))
}

// gomaxprocs returns the GOMAXPROCS a window knows of, else the CPUs it may
// use (Go's default), else 0.
func gomaxprocs(w *Window) (n int, from string) {
	if w.Go != nil && w.Go.GOMAXPROCS > 0 {
		return w.Go.GOMAXPROCS, w.Go.GOMAXPROCSFrom
	}
	if w.AllowedCPUs > 0 {
		return w.AllowedCPUs, "allowed CPUs"
	}
	return 0, ""
}

func checkThreads(w *Window, h *Host) *Finding {
	if !w.IsGo() {
		return nil
	}
	procs, from := gomaxprocs(w)
	if procs == 0 {
		return nil
	}
	threads := 0
	for _, p := range w.Series {
		threads = max(threads, int(p.Threads))
	}
	limit := threadFactor*procs + threadSlack
	if threads <= limit {
		return nil
	}
	sev := Warn
	if threads > 10*limit {
		sev = Critical
	}
	return &Finding{
		Severity: sev,
		Title:    fmt.Sprintf("%d OS threads for GOMAXPROCS %d", threads, procs),
		Evidence: EvidenceList{{"threads", threads, ""}, {"gomaxprocs", procs, ""}, {"gomaxprocs_from", from, ""}},
		Cause:    "Go needs about GOMAXPROCS threads plus a few; every goroutine blocked in a syscall the netpoller cannot handle (file I/O, raw syscalls, DNS through cgo) or in a cgo call holds a thread of its own. Each costs stack memory and scheduler work, and Go stops at 10,000 threads.",
		Fix:      "Find what blocks (gosleuth profile --pid PID --off-cpu, or a goroutine dump): move blocking file I/O behind a bounded worker pool, use the pure-Go resolver (GODEBUG=netdns=go), bound concurrent cgo calls with a semaphore.",
		Sources:  []Source{SourceProc},
	}
}

func checkGOMAXPROCS(w *Window, h *Host) *Finding {
	if !w.IsGo() || w.Go == nil || w.Go.GOMAXPROCS <= 0 {
		return nil
	}
	procs := w.Go.GOMAXPROCS
	allowed := w.AllowedCPUs
	if allowed <= 0 {
		allowed = h.CPUs
	}
	ev := EvidenceList{
		{"gomaxprocs", procs, ""}, {"gomaxprocs_from", w.Go.GOMAXPROCSFrom, ""},
		{"allowed_cpus", allowed, ""}, {"cpu_cores_used", round(w.Cores(), 3), "cores"},
		{"threads", w.Threads(), ""},
	}
	sources := []Source{SourceProc}
	if r, ok := w.Syscalls.Rate("futex"); ok {
		ev = append(ev, Evidence{"futex_per_s", round(r, 0), "/s"})
		sources = append(sources, SourceSyscalls)
	}
	if allowed > 0 && procs > allowed {
		sev := Warn
		if procs >= 4*allowed {
			sev = Critical
		}
		return &Finding{
			Severity:   sev,
			Title:      fmt.Sprintf("GOMAXPROCS %d but only %d CPUs allowed", procs, allowed),
			Evidence:   ev,
			Cause:      "More Ps than CPUs: idle Ps make Ms spin and park (futex), threads multiply and run queues fill. GOMAXPROCS=24 on 2 CPUs added 16-31% CPU and ~20x the futex calls to an idle-ish program.",
			Fix:        "Remove the GOMAXPROCS override (Go 1.25+ follows the cgroup CPU limit by itself), or set it to the CPUs the process may use.",
			Sources:    sources,
			Confidence: "high",
		}
	}
	// Far above what it uses: informational, a cheaper setting exists.
	if procs >= 8 && w.Cores() < float64(procs)/16 && w.WakeupsPerSec() >= idleWakeupsInfo {
		return &Finding{
			Severity:   Info,
			Title:      fmt.Sprintf("GOMAXPROCS %d for %.2f cores of work", procs, w.Cores()),
			Evidence:   ev,
			Cause:      "Light, frequent work spread over many Ps makes the scheduler wake and park threads for each burst; fewer Ps do the same work with fewer wake-ups.",
			Fix:        "Try a smaller GOMAXPROCS (or a CPU quota) for this process and compare CPU and wake-ups with gosleuth compare.",
			Sources:    sources,
			Confidence: "low",
		}
	}
	return nil
}
