package doctor

import (
	"math"

	"github.com/gosleuth/gosleuth/internal/window"
)

// The doctor judges windows; the types are the window layer's
// (internal/window), named here so rules read as before.
type (
	// Source names a kind of evidence a window may carry.
	Source = window.Source
	// Host describes the machine the windows were taken on.
	Host = window.Host
	// Point is one reading of a process's levels.
	Point = window.Point
	// Window is what was observed of one process over [Start, End].
	Window = window.Window
	// Probes holds exact call counts of Go functions.
	Probes = window.Probes
	// Files holds the files caught open between descriptor listings.
	Files = window.Files
	// ProbeCalls counts the calls of one function.
	ProbeCalls = window.ProbeCalls
	// ProbeArg is one value of a probed argument.
	ProbeArg = window.ProbeArg
	// GoFacts are a Go program's runtime settings.
	GoFacts = window.GoFacts
	// Syscalls is an exact syscall count.
	Syscalls = window.Syscalls
	// Stacks summarises CPU stack samples.
	Stacks = window.Stacks
	// Site is a place in the code.
	Site = window.Site
	// LibCall is a call from the program's code into a library.
	LibCall = window.LibCall
	// Share is a name and its fraction of samples.
	Share = window.Share
	// Runtime holds Go runtime metrics over the window.
	Runtime = window.Runtime
	// GoroutineGroup is a group of goroutines with one stack and creator.
	GoroutineGroup = window.GoroutineGroup
)

// The sources a window can be built from.
const (
	SourceProc     = window.SourceProc
	SourceSyscalls = window.SourceSyscalls
	SourceStacks   = window.SourceStacks
	SourceRuntime  = window.SourceRuntime
	SourceProbes   = window.SourceProbes
	SourceFDs      = window.SourceFDs
)

var perSec = window.PerSec

// slope fits y = a + b*t by least squares over the series and returns b (per
// second) and the coefficient of determination r² (0 when y is flat).
func slope(ts, ys []float64) (b, r2 float64) {
	n := float64(len(ts))
	if len(ts) < 3 || len(ts) != len(ys) {
		return 0, 0
	}
	var st, sy, stt, sty, syy float64
	for i := range ts {
		st += ts[i]
		sy += ys[i]
		stt += ts[i] * ts[i]
		sty += ts[i] * ys[i]
		syy += ys[i] * ys[i]
	}
	vt := stt - st*st/n
	vy := syy - sy*sy/n
	cov := sty - st*sy/n
	if vt <= 0 {
		return 0, 0
	}
	b = cov / vt
	if vy <= 0 {
		return b, 0
	}
	r2 = cov * cov / (vt * vy)
	return b, math.Min(r2, 1)
}
