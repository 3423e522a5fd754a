// Package perf holds the Linux perf_event plumbing shared by gosleuth's
// kernel sources: following the threads of a target process as they appear
// (Follower), finding tracepoints in tracefs, opening per-task events with
// errors that say what to do, and reading mmap ring buffers.
//
// It talks to the kernel through golang.org/x/sys/unix only; nothing here
// formats output.
package perf
