package probe

import (
	"errors"
	"time"
)

// ErrNotSupported reports a system without entry uprobes through BPF.
var ErrNotSupported = errors.New("entry uprobes need Linux with BPF uprobe_multi links (kernel 6.6 or later) and root")

// Reg is an argument register of Go's amd64 register ABI.
type Reg int

// Registers a probe can read (the first three integer arguments, and the
// current goroutine).
const (
	RegNone Reg = iota
	RAX
	RBX
	RCX
	R14
)

// String names r as Go's assembler does.
func (r Reg) String() string {
	return [...]string{"", "AX", "BX", "CX", "R14"}[r]
}

// Probe is one function to probe and what to take at each call.
type Probe struct {
	Func string
	// Arg, when set, keeps a histogram of that register's values.
	Arg Reg
	// Stacks samples user stacks (the callers).
	Stacks bool
}

// Options configure Run.
type Options struct {
	// Duration is the window (default 2 s).
	Duration time.Duration
	// Budget is the target CPU the probes may cost, as a fraction of one
	// CPU over the window (default 0.01). Negative turns the governor off.
	Budget float64
	// Preflight is the count-only look that measures call rates before
	// the window (default 100 ms).
	Preflight time.Duration
	// Attached, when set, is called once the window's probes are in place.
	Attached func()
	// Attach picks how the probes are attached (AttachAuto: a uprobe_multi
	// link where the kernel has one, else perf events).
	Attach string
}

// Attach mechanisms (Options.Attach).
const (
	// AttachAuto uses a uprobe_multi link where the kernel has them (6.6
	// and later), else AttachPerf.
	AttachAuto = ""
	// AttachMulti is one BPF uprobe_multi link per target: every thread,
	// present and future, of the target alone.
	AttachMulti = "multi"
	// AttachPerf is the BPF program on one uprobe perf event per function
	// (the uprobe PMU, or a tracefs definition where the kernel lacks it,
	// which cilium/ebpf removes when the event is closed). The event is
	// for every process mapping the binary, since a perf event opened for
	// a PID follows that one thread only: the program drops hits of other
	// processes at once, but they still take the breakpoint.
	AttachPerf = "perf"
	// AttachTracefs counts without BPF, for kernels or containers that
	// refuse it: a uprobe defined in tracefs per function and a sampling
	// perf event per function and CPU; calls only (no stacks or
	// arguments), each a little dearer. Auto falls back to it when BPF is
	// refused.
	AttachTracefs = "tracefs"
)

// Result is what the probes saw.
type Result struct {
	PID       int    `json:"pid"`
	GoVersion string `json:"go_version"`
	Mechanism string `json:"mechanism"`
	// Start is when the window began (its probes attached), Seconds its
	// length.
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	// AttachMS and DetachMS are how long the window's probes took to put
	// in place and to remove (where every function was sampled in
	// bursts, a burst's, the median).
	AttachMS float64 `json:"attach_ms"`
	DetachMS float64 `json:"detach_ms"`
	// CostCPU is the target CPU the probes are estimated to have cost, as
	// a fraction of one CPU over the window.
	CostCPU float64 `json:"cost_cpu"`
	// BudgetSpent says the window ended early because the budget ran out.
	BudgetSpent bool `json:"budget_spent,omitempty"`
	// Exited says the target exited during the window.
	Exited bool       `json:"exited,omitempty"`
	Funcs  []FuncStat `json:"functions"`
	Notes  []string   `json:"notes,omitempty"`
}

// FuncStat is one function's calls.
type FuncStat struct {
	Func   string `json:"func"`
	Symbol string `json:"symbol,omitempty"`
	// Kind is how its probe ran (emulated or single-stepped); Skipped says
	// why it was not probed (absent, too hot).
	Kind    string `json:"kind,omitempty"`
	Skipped string `json:"skipped,omitempty"`
	// Count is the calls in the window: exact, or where Sampled is set an
	// estimate scaled from the calls counted in bursts. PerSec is their
	// rate. PreflightPerSec is the rate the pre-flight measured.
	Count           uint64  `json:"count"`
	PerSec          float64 `json:"per_sec"`
	PreflightPerSec float64 `json:"preflight_per_sec"`
	// Sampled is set for a function too hot to probe through the window
	// within the budget, probed in bursts instead.
	Sampled *Sampling `json:"sampled,omitempty"`
	// StackEvery is the sampling of stacks: one call in StackEvery.
	StackEvery int `json:"stack_every,omitempty"`
	// Callers are the calling sites by share of the sampled stacks: the
	// direct caller and the program's own code nearest to the call.
	Callers []Caller `json:"callers,omitempty"`
	// Arg names the register read and Args its values by share.
	Arg  string   `json:"arg,omitempty"`
	Args []ArgVal `json:"args,omitempty"`
}

// Sampling describes a function probed in bursts: attached for part of
// the window only, so that its calls cost the target no more than the
// budget. Its Count and PerSec are estimates from the calls counted in
// the bursts, its callers and arguments are those of the bursts.
type Sampling struct {
	// Duty is the share of the window the probe was attached: OnSeconds
	// over the window's seconds.
	Duty float64 `json:"duty"`
	// Bursts is how many times it was attached, OnSeconds for how long in
	// all, and Counted the calls counted then (exact for those spans).
	Bursts    int     `json:"bursts"`
	OnSeconds float64 `json:"on_seconds"`
	Counted   uint64  `json:"counted"`
	// PerSecMargin bounds the error of PerSec: three standard errors of
	// the mean of the bursts' rates (from their spread, or the count's
	// Poisson error with fewer than three bursts), plus what the
	// attach and detach edges may add or take (BurstEdge a burst).
	PerSecMargin float64 `json:"per_sec_margin"`
}

// Caller is a calling site and its share of the sampled calls.
type Caller struct {
	Func  string  `json:"func"`
	File  string  `json:"file,omitempty"`
	Line  int     `json:"line,omitempty"`
	Share float64 `json:"share"`
	// Stack is the caller's own callers, outermost last (up to 8).
	Stack []string `json:"stack,omitempty"`
}

// ArgVal is one value of the probed register and its calls (estimated
// like FuncStat.Count for a sampled function).
type ArgVal struct {
	Value uint64  `json:"value"`
	Count uint64  `json:"count"`
	Share float64 `json:"share"`
}
