// Package compare runs an A/B comparison of two commands, two running
// processes or the values of one parameter, under the same conditions and,
// for servers, the same fixed load, and says with honest statistics which
// metrics changed.
//
// # Protocol
//
// After a warm-up, windows of each side are taken in randomized ABBA blocks
// (each block ABBA or BAAB by a seeded coin; a sweep of k values uses a
// random order followed by its reverse), so slow drift of the machine falls
// on both sides alike. One window is one sample of every metric. Processes
// compare starts run on the same CPUs (sched_setaffinity at fork, inherited
// by every thread and child), one side at a time: each window gets a fresh
// process, started and warmed up, so a window is a sample of the program,
// not of one process of it (two processes of one program differ: their
// memory layout, their phase against the kernel's tick), and the pairs of
// the schedule share no process. With Config.Keep one process a side is
// kept and the side not being measured is paused (SIGSTOP to its process
// group).
//
// # Metrics
//
// Per window, from the kernel and the runtime, never from pprof: CPU user
// and system time and wake-ups (voluntary switches) and involuntary
// switches summed over threads by internal/proc (merged by thread ID
// through the window, so threads that exit are kept), threads and peak
// RSS; syscalls per second by kind from exact per-task tracepoint counters
// (internal/syscalls) in windows of their own, because tracepoints tax the
// target; latency percentiles from internal/load's open-loop engine (one
// HDR histogram per window); GC cycles and the GC's CPU share from a
// runtime source (internal/goruntime) when the process has one.
//
// # Statistics
//
// Per side the median and its order-statistic 95% confidence interval; per
// metric p = min(Mann-Whitney U, Kolmogorov-Smirnov) (Chromium Pinpoint's
// rule: U misses changes of spread, KS misses discrete data), a weighted
// Holm correction across the metrics (the metrics that decide share most
// of the level, see Options.Primary), the Hodges-Lehmann estimate of B/A with its
// distribution-free interval, and a verdict: better, worse, same (the
// interval inside the noise band) or unknown (with the windows a side that
// would likely decide). Outlier windows (modified z-score of the median
// absolute deviation above 3.5) are reported, never dropped.
//
// Each round of the schedule takes one window of every side, so the
// windows of a round pair up. Where the pairs can reach a comparison's
// share of the level (10 pairs give at best 2/1024), its p-value is
// Wilcoxon's signed-rank test of the pairs' log ratios, the test of the
// randomized block design (exact: under no change the two windows of a
// round were equally likely taken in either order); U and KS are still
// reported. Pairing takes out what moves between rounds, a restarted
// process's own level and the machine's drift: over twenty default runs of
// a pair about 3% apart under load, CPU came out at p <= 0.01 in 15 by the
// pairs, in 10 by U and KS (bench/compare-stats). The table marks such p-values "paired".
// The ratio of a paired comparison is then the Hodges-Lehmann estimate of
// the pairs' log ratios (the median of their Walsh averages) with the
// signed-rank interval, so the estimate and the test come from the same
// pairs and the interval has their precision.
//
// Under load, CPU and CPU per 1k requests are tested on the pairs net of
// the load generator's own CPU (LoadAdjustment). The generator sends the
// same requests in every window, so what moves its CPU is what the machine
// charges for wake-ups and system calls at the time, a cost that on a
// shared VM moves over tens of seconds and that a server pays too: each
// pair's log ratio of CPU, less a slope times the generator's (fitted
// within the sides, so the difference tested does not set it). Its p is a
// randomization test over every swap of the pairs that fits the slope
// again and applies the same rules under each (no adjustment where the
// slope is not positive or where the generator's own pairs differ between
// the sides), so it stays exact. The report's "load cost" line gives the
// slope, the correlation, the generator's B/A and the raw pairs' p.
package compare
