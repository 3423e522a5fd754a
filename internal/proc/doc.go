// Package proc reads processes and threads from Linux's /proc cheaply enough
// to run once a second on a production host, and turns two readings into
// rates.
//
// # Why it is written by hand
//
// Go's usual ways of reading /proc cost far more than the data: os.ReadFile
// spends about ten syscalls per file (open, fcntl, epoll registration, fstat,
// two reads, close) and allocates a buffer each time, and libraries such as
// prometheus/procfs or gopsutil re-open every file on every call. This
// package is gosleuth's own edge, so it does the minimum:
//
//   - per-task files are opened once and re-read with pread(2) at offset 0;
//   - /proc and /proc/PID/task are rescanned with getdents64 on kept
//     directory handles, and only when something may have changed;
//   - every thread's schedstat (the cheapest file) is read each refresh, and
//     stat and status only for threads whose run time or timeslice count
//     moved, plus a full pass every few refreshes;
//   - buffers are reused and parsing works on bytes, so a steady-state
//     refresh allocates nothing;
//   - the number of kept descriptors is capped (each costs the kernel about
//     4 KiB once read), beyond which files are opened, read and closed;
//   - one goroutine does all of it: no goroutine per process or descriptor.
//
// # Layout
//
// [Reader] produces a [Snapshot] of cumulative counters; [Rates.Compute]
// turns two snapshots into per-second rates and percentages. Parsers are pure
// functions on bytes, tested on fixtures captured from a real host, and the
// /proc root is injectable so the reader runs on those fixtures too.
//
// Context switches of a process are summed over its threads:
// /proc/PID/status counts the main thread only.
package proc
