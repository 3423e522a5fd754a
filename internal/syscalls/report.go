package syscalls

import (
	"cmp"
	"slices"
)

// Modes a Report can come from.
const (
	ModeExact  = "exact"        // one counter per syscall and thread
	ModeTotals = "exact-totals" // one counter per thread: totals only
	ModeProc   = "proc"         // approximate, from /proc
)

// Report is one window of syscall accounting for a process: what the text
// and JSON outputs show.
type Report struct {
	// Mode is ModeExact, ModeTotals or ModeProc; Mechanism says how the
	// counts were taken and Reason why this mode was chosen.
	Mode      string   `json:"mode"`
	Mechanism string   `json:"mechanism"`
	Reason    string   `json:"reason,omitempty"`
	PID       int      `json:"pid"`
	Comm      string   `json:"comm,omitempty"`
	Command   []string `json:"command,omitempty"`
	DurationS float64  `json:"duration_s"`
	// Total is every syscall counted (in ModeProc: read- plus write-class
	// calls from /proc/PID/io).
	Total uint64 `json:"total"`
	// Threads is the number of threads the events were attached to;
	// ThreadsLater those found after attach (covered by inheritance, or
	// by new per-thread events with --threads).
	Threads      int `json:"threads"`
	ThreadsLater int `json:"threads_later"`
	// Lost is the number of events the kernel dropped (always 0 for
	// counters; sampling modes fill it).
	Lost uint64 `json:"lost"`
	// Exited says the target ended during the window; ExitCode is set for
	// a command run with "-- CMD".
	Exited   bool     `json:"exited"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Syscalls []Row    `json:"syscalls"`
	// PerThread is filled with --threads: each thread's own counts.
	PerThread []ThreadRow `json:"per_thread,omitempty"`
	// Unattributed is, with --threads, the calls in the exact total that
	// no thread's own counters saw (made before gosleuth found the thread).
	Unattributed uint64 `json:"unattributed,omitempty"`
	// Approx holds the /proc-only figures in ModeProc.
	Approx *Approx `json:"approx,omitempty"`
	// ErrorsByErrno lists failed calls with --errors or --latency, most
	// frequent first.
	ErrorsByErrno []ErrnoRow `json:"errors_by_errno,omitempty"`
	// Sampled says how many threads the sampling events covered (--errors,
	// --latency); they follow new threads from when gosleuth finds them.
	Sampled int `json:"sampled_threads,omitempty"`
	// Unseen is, with --latency, how many counted calls the sampler did
	// not see (records dropped when a ring filled, also at a thread's
	// exit where the kernel cannot report them, or made before gosleuth
	// found the thread): latencies and errors cover the rest.
	Unseen uint64 `json:"unseen_by_sampler,omitempty"`
	// ReadErrors counts counter reads that failed; the threads concerned
	// kept their last counts, so the totals may be low.
	ReadErrors int `json:"read_errors,omitempty"`
}

// ErrnoRow is one (syscall, errno) pair of failed calls.
type ErrnoRow struct {
	Name  string `json:"name"`
	Nr    int    `json:"nr"`
	Errno string `json:"errno"`
	Count uint64 `json:"count"`
}

// Latency is the time spent in one syscall, entry to exit.
type Latency struct {
	Calls   uint64  `json:"calls"`
	TotalNS int64   `json:"total_ns"`
	AvgNS   float64 `json:"avg_ns"`
	P99NS   int64   `json:"p99_ns"`
	MaxNS   int64   `json:"max_ns"`
}

// Row is one syscall's line.
type Row struct {
	Name     string  `json:"name"`
	Nr       int     `json:"nr"`
	Count    uint64  `json:"count"`
	RatePerS float64 `json:"rate_per_s"`
	Percent  float64 `json:"percent"`
	// Errors is set with --errors or --latency: failed calls seen.
	Errors *uint64 `json:"errors,omitempty"`
	// Latency is set with --latency.
	Latency *Latency `json:"latency,omitempty"`
}

// ThreadRow is one thread's counts with --threads.
type ThreadRow struct {
	TID      int    `json:"tid"`
	Comm     string `json:"comm,omitempty"`
	Total    uint64 `json:"total"`
	Exited   bool   `json:"exited,omitempty"`
	Syscalls []Row  `json:"syscalls"`
}

// Approx is what /proc tells without privileges.
type Approx struct {
	// ReadCalls and WriteCalls are the deltas of /proc/PID/io syscr and
	// syscw: read- and write-class syscalls (read, pread64, readv,
	// recvfrom, ... and write, pwrite64, sendto, ...) of all threads.
	ReadCalls  uint64  `json:"read_calls"`
	WriteCalls uint64  `json:"write_calls"`
	ReadRate   float64 `json:"read_rate_per_s"`
	WriteRate  float64 `json:"write_rate_per_s"`
	// SampleHz and Samples describe the sampling of
	// /proc/PID/task/*/syscall; Blocked says in which syscalls threads
	// were found waiting, as a share of all thread samples; Running and
	// User are the shares found running or stopped outside a syscall.
	SampleHz float64      `json:"sample_hz"`
	Samples  int          `json:"samples"`
	Blocked  []BlockedRow `json:"blocked"`
	Running  float64      `json:"running_percent"`
	User     float64      `json:"not_in_syscall_percent"`
}

// BlockedRow is one syscall threads were found waiting in.
type BlockedRow struct {
	Name    string  `json:"name"`
	Nr      int     `json:"nr"`
	Samples int     `json:"samples"`
	Percent float64 `json:"percent"`
}

// Rows turns counts (indexed like events) into rows sorted by count, then
// name, leaving out zeros, and returns their sum. Raw events (the total)
// are left out.
func Rows(events []Event, counts []uint64, seconds float64) ([]Row, uint64) {
	var rows []Row
	var total uint64
	for i, ev := range events {
		if ev.Raw || counts[i] == 0 {
			continue
		}
		total += counts[i]
		rows = append(rows, Row{Name: ev.Name, Nr: ev.Nr, Count: counts[i]})
	}
	finishRows(rows, total, seconds)
	return rows, total
}

func finishRows(rows []Row, total uint64, seconds float64) {
	for i := range rows {
		if seconds > 0 {
			rows[i].RatePerS = float64(rows[i].Count) / seconds
		}
		if total > 0 {
			rows[i].Percent = 100 * float64(rows[i].Count) / float64(total)
		}
	}
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
}
