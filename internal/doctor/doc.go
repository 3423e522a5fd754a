// Package doctor turns what gosleuth observed about processes into findings:
// each with the evidence (the numbers), the cause in terms of Go's runtime,
// the fix, the sources it used and a confidence.
//
// The flow is one way: the window layer (internal/window) builds a [Window]
// per process from the sources (the /proc engine always; syscall counts,
// stack samples and runtime metrics when a close look could take them), the
// doctor's [Triage] tells a whole-host collection which processes deserve a
// close look, every [Rule] in the registry is a pure function of a Window and
// the [Host], and a [Report] collects the findings and what could not be
// checked. Rules never touch the kernel, so they are tested on windows built
// in the test, and thresholds are relative (per CPU-second, per core, per
// wake-up) so they hold on small and many-core hosts alike.
package doctor
