package compare

import (
	"fmt"
	"strings"
)

// Metric describes one measured quantity of a window.
type Metric struct {
	// Name is the key in Window.Values ("cpu", "sys", "syscall.futex").
	Name string `json:"name"`
	// Label is what the table and the sentences call it.
	Label string `json:"label"`
	// Unit is the unit of the values ("%core", "/s", "MB", "ms").
	Unit string `json:"unit"`
	// HigherIsBetter is false for costs (CPU, wake-ups, latency).
	HigherIsBetter bool `json:"higher_is_better,omitempty"`
	// PerProcess marks quantities that differ from one process to the
	// next more than from one window to the next (threads, RSS, the
	// user/system split): windows of one process are not independent
	// samples of them, so they are tested only with at least 3 processes
	// a side (restarted processes, not --keep).
	PerProcess bool `json:"per_process,omitempty"`
	// Kind is the window kind that measures it: "cpu" or "syscalls".
	Kind string `json:"kind"`
	// phrase words a change: "uses %s CPU" with "31% more".
	phrase string
}

// The metrics of CPU windows, in table order.
var (
	metricCPU = Metric{Name: "cpu", Label: "CPU", Unit: "%core", Kind: kindCPU, phrase: "uses %s CPU"}
	// The split of CPU into user and system is the kernel's tick sampling
	// (it charges each 4 ms tick to the mode it lands in, and /proc scales
	// the counts to the precise total). A periodic program locks to the
	// tick at a phase of its own, so each process of it has its own split:
	// an AA run of a 2 ms ticker had one process at 0.8% user and 4.2%
	// system in every window, the other at 4.3% and 0.8%, and the test
	// of their windows called user worse and system better. The total
	// (schedstat's nanoseconds) is not sampled.
	metricUser    = Metric{Name: "user", Label: "user CPU", Unit: "%core", Kind: kindCPU, PerProcess: true, phrase: "uses %s user CPU"}
	metricSys     = Metric{Name: "sys", Label: "system CPU", Unit: "%core", Kind: kindCPU, PerProcess: true, phrase: "uses %s system CPU"}
	metricCPUPerK = Metric{Name: "cpu_per_1k", Label: "CPU per 1k requests", Unit: "ms", Kind: kindCPU, phrase: "uses %s CPU per request"}
	metricWakeups = Metric{Name: "wakeups", Label: "wake-ups", Unit: "/s", Kind: kindCPU, phrase: "wakes up %s often"}
	metricInvol   = Metric{Name: "invol", Label: "involuntary switches", Unit: "/s", Kind: kindCPU, phrase: "is preempted %s often"}
	metricThreads = Metric{Name: "threads", Label: "threads", Unit: "", Kind: kindCPU, PerProcess: true, phrase: "runs %s threads"}
	metricRSS     = Metric{Name: "rss", Label: "peak RSS", Unit: "MB", Kind: kindCPU, PerProcess: true, phrase: "holds %s memory (peak RSS)"}
	metricP50     = Metric{Name: "p50", Label: "P50", Unit: "ms", Kind: kindCPU, phrase: "answers %s slowly at the median (P50)"}
	metricP99     = Metric{Name: "p99", Label: "P99", Unit: "ms", Kind: kindCPU, phrase: "has a P99 latency %s"}
	metricP999    = Metric{Name: "p999", Label: "P99.9", Unit: "ms", Kind: kindCPU, phrase: "has a P99.9 latency %s"}
	metricGC      = Metric{Name: "gc_cycles", Label: "GC cycles", Unit: "/s", Kind: kindCPU, phrase: "runs %s GC cycles"}
	metricGCShare = Metric{Name: "gc_cpu_share", Label: "GC CPU share", Unit: "%", Kind: kindCPU, phrase: "spends %s of its CPU in the GC"}
	// Goroutines at a window's end are the process's state, not a sample
	// of it (PerProcess); goroutines created per second are its work.
	metricGoroutines = Metric{Name: "goroutines", Label: "goroutines", Unit: "", Kind: kindCPU, PerProcess: true, phrase: "runs %s goroutines"}
	metricGoCreated  = Metric{Name: "goroutines_created", Label: "goroutines created", Unit: "/s", Kind: kindCPU, phrase: "creates %s goroutines"}
	metricSyscalls   = Metric{Name: "syscalls", Label: "syscalls", Unit: "/s", Kind: kindSyscalls, phrase: "makes %s syscalls"}
)

// loadCPUKey holds, in a CPU window under load, the load generator's own
// CPU in the window (% of a core): compare's process, which runs the
// generator and the sampler and nothing else meanwhile, less the sampler's
// thread. It is not a metric of the sides but a covariate of their CPU:
// Analyze takes its share out of the CPU pairs (LoadAdjustment).
const loadCPUKey = "load_cpu"

// Window kinds.
const (
	kindCPU      = "cpu"
	kindSyscalls = "syscalls"
)

// syscallMetric is the metric of one syscall's rate.
func syscallMetric(name string) Metric {
	return Metric{Name: "syscall." + name, Label: name, Unit: "/s", Kind: kindSyscalls,
		phrase: "makes %s " + name + " calls"}
}

// sentence words a change of ratio r (B/A) of m for side name.
func (m Metric) sentence(name string, r float64) string {
	pct := fmt.Sprintf("%.0f%%", 100*absf(r-1))
	if absf(r-1) < 0.1 {
		pct = fmt.Sprintf("%.1f%%", 100*absf(r-1))
	}
	var how string
	switch {
	case strings.Contains(m.phrase, "often"):
		how = pct + " more"
		if r < 1 {
			how = pct + " less"
		}
	case strings.HasPrefix(m.phrase, "has a") || strings.HasPrefix(m.phrase, "answers"):
		how = pct + " higher"
		if strings.HasPrefix(m.phrase, "answers") {
			how = pct + " more"
		}
		if r < 1 {
			how = pct + " lower"
			if strings.HasPrefix(m.phrase, "answers") {
				how = pct + " less"
			}
		}
	case strings.Contains(m.phrase, "calls") || strings.Contains(m.phrase, "cycles") || strings.Contains(m.phrase, "threads") || strings.Contains(m.phrase, "goroutines"):
		how = pct + " more"
		if r < 1 {
			how = pct + " fewer"
		}
	default:
		how = pct + " more"
		if r < 1 {
			how = pct + " less"
		}
	}
	phrase := m.phrase
	if phrase == "" {
		phrase = "has %s " + m.Label
	}
	return name + " " + fmt.Sprintf(phrase, how)
}

func absf(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
