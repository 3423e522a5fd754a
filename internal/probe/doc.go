// Package probe counts calls of Go functions in a running process from
// outside, names their callers and reads their register arguments, with
// entry uprobes (a source, in docs/design.md's terms).
//
// Functions are found in the target's own pclntab (internal/stacks reads
// it, stripped, PIE and cgo binaries alike). Each probe sits on the PUSHQ BP
// after Go's stack-bound check, which the kernel emulates (~0.8 µs a hit)
// and which runs once per call (the check itself re-runs after a stack
// growth or a preemption); a function without that prologue is probed at
// its entry and single-stepped (~10 µs a hit), and said so.
//
// One BPF uprobe_multi link per target covers all of its threads, present
// and future, and no other process; its program keeps per-probe counters,
// sampled user stacks and bounded histograms of one argument register in
// kernel maps. The kernel removes the link when gosleuth exits, SIGKILL
// included. The engine never uses return probes (they crash Go), never
// inherit on perf uprobes (it kills the target at its next clone), and
// never a perf event on the thread group alone (it counts one thread).
//
// A cost governor is on by default: a short count-only pre-flight measures
// each function's call rate; one whose projected cost through the window
// exceeds the budget is probed in bursts instead (attached and detached in
// turn, the duty cycle chosen from the budget left), its count scaled from
// the bursts and reported as sampled (FuncStat.Sampled); one probed
// throughout whose calls rise past its share of the budget is moved to the
// bursts during the window; one too hot even for two short bursts is
// reported as too hot to probe; stacks are sampled one call in N when
// calls are frequent; the window ends early when the budget is spent.
package probe
