package syscalls

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gosleuth/gosleuth/internal/termsafe"
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

// WriteJSON writes r as one JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	if r.Syscalls == nil {
		r.Syscalls = []Row{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes r like strace -c: a header naming the mechanism, the
// window and the threads, then one line per syscall sorted by count.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	target := fmt.Sprintf("pid %d", r.PID)
	if r.Comm != "" {
		target += " (" + r.Comm + ")"
	}
	if len(r.Command) > 0 {
		target = fmt.Sprintf("%s: %s", target, strings.Join(r.Command, " "))
	}
	fmt.Fprintf(&b, "syscalls of %s, %s\n", target, r.Mode)
	fmt.Fprintf(&b, "mechanism: %s\n", r.Mechanism)
	if r.Reason != "" {
		fmt.Fprintf(&b, "why: %s\n", r.Reason)
	}
	fmt.Fprintf(&b, "window %.2fs, %d threads at attach, %d found later, %d events lost", r.DurationS, r.Threads, r.ThreadsLater, r.Lost)
	if r.Exited {
		b.WriteString(", target exited")
		if r.ExitCode != nil {
			fmt.Fprintf(&b, " (status %d)", *r.ExitCode)
		}
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if r.Mode == ModeProc && r.Approx != nil {
		writeApprox(&b, r.Approx)
	} else {
		b.WriteString("\n")
		writeRows(&b, r.Syscalls, r.Total, r.DurationS)
	}
	for _, t := range r.PerThread {
		fmt.Fprintf(&b, "\nthread %d", t.TID)
		if t.Comm != "" {
			fmt.Fprintf(&b, " (%s)", t.Comm)
		}
		if t.Exited {
			b.WriteString(", exited")
		}
		b.WriteString("\n")
		writeRows(&b, t.Syscalls, t.Total, r.DurationS)
	}
	if r.ReadErrors > 0 {
		fmt.Fprintf(&b, "\n%d counter reads failed: those threads kept their last counts, totals may be low\n", r.ReadErrors)
	}
	if r.Unseen > 0 {
		fmt.Fprintf(&b, "\n%d counted calls were not seen by the latency sampler (ring full or thread found late): latency and errors cover the rest\n", r.Unseen)
	}
	if len(r.ErrorsByErrno) > 0 {
		fmt.Fprintf(&b, "\nfailed calls by errno (%d threads sampled):\n%12s  %-16s %s\n", r.Sampled, "count", "errno", "syscall")
		for _, e := range r.ErrorsByErrno {
			fmt.Fprintf(&b, "%12d  %-16s %s\n", e.Count, e.Errno, e.Name)
		}
	}
	if r.Unattributed > 0 {
		fmt.Fprintf(&b, "\nunattributed: %d calls made by threads before gosleuth found them (in the exact total, in no thread's counts)\n", r.Unattributed)
	}
	_, err := io.WriteString(w, termsafe.String(b.String())) // comm and command are the target's
	return err
}

func writeRows(b *strings.Builder, rows []Row, total uint64, seconds float64) {
	var errs, lat bool
	for _, r := range rows {
		errs = errs || r.Errors != nil
		lat = lat || r.Latency != nil
	}
	fmt.Fprintf(b, "%12s %12s %8s", "count", "rate/s", "% calls")
	if errs {
		fmt.Fprintf(b, " %9s", "errors")
	}
	if lat {
		fmt.Fprintf(b, " %11s %10s %10s %10s", "total ms", "avg us", "p99 us", "max us")
	}
	b.WriteString("  syscall\n")
	for _, r := range rows {
		fmt.Fprintf(b, "%12d %12.1f %8.2f", r.Count, r.RatePerS, r.Percent)
		if errs {
			if r.Errors != nil {
				fmt.Fprintf(b, " %9d", *r.Errors)
			} else {
				fmt.Fprintf(b, " %9s", "")
			}
		}
		if lat {
			if l := r.Latency; l != nil {
				fmt.Fprintf(b, " %11.1f %10.2f %10.2f %10.2f", float64(l.TotalNS)/1e6, l.AvgNS/1e3, float64(l.P99NS)/1e3, float64(l.MaxNS)/1e3)
			} else {
				fmt.Fprintf(b, " %11s %10s %10s %10s", "", "", "", "")
			}
		}
		fmt.Fprintf(b, "  %s\n", r.Name)
	}
	rate := 0.0
	if seconds > 0 {
		rate = float64(total) / seconds
	}
	fmt.Fprintf(b, "%12d %12.1f %8.2f  total\n", total, rate, 100.0)
}

func writeApprox(b *strings.Builder, a *Approx) {
	fmt.Fprintf(b, "\nfrom /proc/PID/io (all threads; each class is several syscalls):\n")
	fmt.Fprintf(b, "%12s %12s  %s\n", "count", "rate/s", "class")
	fmt.Fprintf(b, "%12d %12.1f  read-class (read, pread64, readv, recvfrom, recvmsg, ...)\n", a.ReadCalls, a.ReadRate)
	fmt.Fprintf(b, "%12d %12.1f  write-class (write, pwrite64, writev, sendto, sendmsg, ...)\n", a.WriteCalls, a.WriteRate)
	fmt.Fprintf(b, "\nwhere threads wait, from %d samples of /proc/PID/task/*/syscall at %.0f Hz:\n", a.Samples, a.SampleHz)
	fmt.Fprintf(b, "%8s %8s  %s\n", "% time", "samples", "state")
	for _, r := range a.Blocked {
		fmt.Fprintf(b, "%8.2f %8d  in %s\n", r.Percent, r.Samples, r.Name)
	}
	fmt.Fprintf(b, "%8.2f %8s  running\n", a.Running, "")
	fmt.Fprintf(b, "%8.2f %8s  stopped outside a syscall\n", a.User, "")
}
