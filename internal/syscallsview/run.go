// Package syscallsview is the view behind "gosleuth syscalls": it drives a
// syscalls.Session for the window, redraws the table on a terminal, and
// writes the report as text (like strace -c) or JSON.
package syscallsview

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gosleuth/gosleuth/internal/syscalls"
	"github.com/gosleuth/gosleuth/internal/units"
)

// Options say how the report is shown.
type Options struct {
	// Interval is the refresh period of the live table (default 1 s).
	Interval time.Duration
	// JSON selects JSON output; Live redraws the report every Interval
	// (stdout is a terminal).
	JSON, Live bool
	// Out, when set, receives the final report instead of stdout (the live
	// table still goes to stdout).
	Out func(write func(io.Writer) error) error
}

// Run counts cfg's target for the window and writes the report to stdout.
// Progress and notes go to stderr; a command's own output goes to stdout,
// or to stderr when the report is JSON.
func Run(ctx context.Context, cfg syscalls.Config, o Options, stdout, stderr io.Writer) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	cmdOut := stdout
	if o.JSON {
		cmdOut = stderr
	}
	s, err := syscalls.Start(cfg, cmdOut, stderr)
	if err != nil {
		return err
	}
	// The command exits after Run: the counters' release (seconds of the
	// kernel's grace periods) is left to a releaser process.
	defer s.Detach()
	t := s.Target()
	// "gosleuth syscalls:", as other commands' progress lines: "gosleuth:"
	// starts an error.
	fmt.Fprintf(stderr, "gosleuth syscalls: counting syscalls of pid %d (%s), %s\n", t.PID, units.Plural(t.Threads, "thread"), t.Mode)
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		tm := time.NewTimer(cfg.Duration)
		defer tm.Stop()
		deadline = tm.C
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	nextDraw := time.Now().Add(o.Interval)
	exited, note := false, ""
loop:
	for {
		select {
		case <-ctx.Done():
			note = "interrupted"
			break loop
		case <-deadline:
			break loop
		case <-s.Exited():
			exited = true
			break loop
		case now := <-tick.C:
			s.Tick(now)
			if o.Live && !now.Before(nextDraw) {
				nextDraw = now.Add(o.Interval)
				r, err := s.Read()
				if err != nil {
					return err
				}
				io.WriteString(stdout, clearScreen)
				if err := write(r, o.JSON, stdout); err != nil {
					return err
				}
			}
		}
	}
	r, err := s.Finish(exited, note)
	if err != nil {
		return err
	}
	if o.Live {
		io.WriteString(stdout, clearScreen)
	}
	final := func(w io.Writer) error { return write(r, o.JSON, w) }
	if o.Out != nil {
		if err := o.Out(final); err != nil {
			return err
		}
	} else if err := final(stdout); err != nil {
		return err
	}
	return nil
}

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

func write(r *syscalls.Report, asJSON bool, w io.Writer) error {
	if asJSON {
		return WriteJSON(w, r)
	}
	return WriteText(w, r)
}
