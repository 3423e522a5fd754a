// Package stacks samples the user and kernel call stacks of a running
// process with per-thread perf_event cpu-clock events, symbolizes them from
// the binary itself (Go pclntab with inlined frames, ELF symbols for C code,
// /proc/kallsyms for the kernel), classifies each sample into a Go runtime
// class (user code, GC marking, mark assist, scheduler, syscalls, netpoll,
// sysmon, cgo, idle runtime threads) and writes the result as a pprof
// profile, folded stacks or a self-contained flame graph page.
//
// # Stack quality
//
// The kernel unwinds user stacks with frame pointers. Go keeps them, but a
// frameless leaf (an assembly syscall stub, or any function in its prologue
// or epilogue) leaves the frame pointer on its caller's frame, so the
// kernel's chain skips the caller. The sampler asks for the user registers
// and the top of the user stack with every sample and, when the leaf is a Go
// function, reads the return address at SP plus the function's stack-pointer
// delta from pclntab's pcsp table and puts the missing caller back.
//
// Inlined calls have no frame of their own; the symbolizer expands them from
// the function's inline tree (FUNCDATA_InlTree indexed by
// PCDATA_InlTreeIndex), as the Go runtime's own traceback does.
//
// # Off-CPU
//
// With Options.OffCPU each thread also gets a sched:sched_switch
// tracepoint event that samples its stack when it switches out, and whose
// context-switch records say when it ran again; each stack is weighted by
// that blocked time. In a Go program most thread-level blocking is runtime
// threads waiting for work (parked Ms, sysmon, the netpoller): those stacks
// are left out unless Options.OffCPUAll. Goroutines waiting on channels or
// mutexes do so in user space and never reach the scheduler of the kernel.
//
// # Privileges
//
// As root (or with CAP_PERFMON) samples carry kernel stacks. Otherwise only
// user mode can be sampled: the profile then gets a synthetic
// "[kernel time, not sampled]" leaf per thread, weighted by the thread's
// system time from /proc, so totals stay true.
package stacks
