package syscallsview

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"
)

// WriteJSON writes r as one JSON object and a newline.
func WriteJSON(w io.Writer, r *syscalls.Report) error {
	if r.Syscalls == nil {
		r.Syscalls = []syscalls.Row{}
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
func WriteText(w io.Writer, r *syscalls.Report) error {
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
	fmt.Fprintf(&b, "window %.2fs, %s at attach, %d found later, %d events lost", r.DurationS, units.Plural(r.Threads, "thread"), r.ThreadsLater, r.Lost)
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
	if r.Mode == syscalls.ModeProc && r.Approx != nil {
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

func writeRows(b *strings.Builder, rows []syscalls.Row, total uint64, seconds float64) {
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

func writeApprox(b *strings.Builder, a *syscalls.Approx) {
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
