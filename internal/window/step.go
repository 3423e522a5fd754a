package window

import (
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// Step is what one process did between two readings of it, for a view
// that folds each interval into aggregates of its own (the exporter's
// groups) rather than keep a window per process. It is subtracted here, as
// every interval in gosleuth is, with the windows' definitions: CPU from
// the threads' schedstat run time where both readings had the threads,
// the clock ticks otherwise; switches merged by thread.
type Step struct {
	// CPUSec is the process's CPU seconds, UserSec and SysSec its split
	// by the clock ticks' ratio.
	CPUSec, UserSec, SysSec float64
	// Wakeups and Involuntary are voluntary and involuntary context
	// switches merged by thread, when SwitchesKnown.
	Wakeups, Involuntary uint64
	SwitchesKnown        bool
}

// StepOf returns what a process did from its reading earlier to its
// reading later (the same process: PID and start time). A nil earlier
// means it was born between the two readings: everything it did counts.
// It allocates nothing.
func StepOf(earlier, later *proc.Proc) Step {
	var st Step
	threads := later.Known&proc.KnownCtxsw != 0
	if earlier == nil {
		du, ds := float64(later.UTime)/proc.ClockTicks, float64(later.STime)/proc.ClockTicks
		st.CPUSec = du + ds
		if threads {
			st.CPUSec = float64(later.RunMerged) / 1e9
			st.Wakeups, st.Involuntary, st.SwitchesKnown = later.VolMerged, later.InvolMerged, true
		}
		st.UserSec, st.SysSec = proc.SplitCPU(st.CPUSec, du, ds, du, ds)
		return st
	}
	du := float64(proc.Delta(earlier.UTime, later.UTime)) / proc.ClockTicks
	ds := float64(proc.Delta(earlier.STime, later.STime)) / proc.ClockTicks
	st.CPUSec = du + ds
	if threads && earlier.Known&proc.KnownCtxsw != 0 {
		st.CPUSec = float64(proc.Delta(earlier.RunMerged, later.RunMerged)) / 1e9
		st.Wakeups = proc.Delta(earlier.VolMerged, later.VolMerged)
		st.Involuntary = proc.Delta(earlier.InvolMerged, later.InvolMerged)
		st.SwitchesKnown = true
	}
	st.UserSec, st.SysSec = proc.SplitCPU(st.CPUSec, du, ds, float64(later.UTime), float64(later.STime))
	return st
}

// SyscallsBetween is what one exact syscall counter counted between two of
// its readings (earlier first): the calls by name and the total. A count
// that went back counts nothing.
func SyscallsBetween(earlier, later syscalls.Reading) syscalls.Reading {
	d := syscalls.Reading{ByName: make(map[string]uint64, len(later.ByName)), Total: proc.Delta(earlier.Total, later.Total)}
	for name, n := range later.ByName {
		d.ByName[name] = proc.Delta(earlier.ByName[name], n)
	}
	return d
}
