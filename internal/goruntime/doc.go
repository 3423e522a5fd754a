// Package goruntime is gosleuth's view of Go programs from outside:
// discovery of any process's Go facts without its cooperation, and readers
// of its runtime metrics when it offers a way in.
//
// # Discovery
//
// [Discover] reads /proc/PID and the executable's build information (which
// even stripped Go binaries keep): Go version, main module, build settings
// (cgo, -race, GOEXPERIMENT, GOAMD64, DefaultGODEBUG), the GOMAXPROCS and
// GODEBUG environment variables, the CPU affinity mask and the cgroup's CPU
// limit and throttling counters, and from those the GOMAXPROCS the program
// runs with, computed the way its Go version does.
//
// # Runtime sources
//
// [Connect] finds a [Source] for a process: its gosleuth agent (package
// agent, a Unix socket named after the PID in a per-user directory; stale
// or foreign sockets are ignored with a note), a net/http/pprof endpoint
// (with expvar's /debug/vars when served), or a Prometheus client_golang
// /metrics page. [Source.Read] returns a [Sample]: cumulative counters and
// gauges at one instant, with [Known] bits saying which fields the source
// could give (the agent gives all; pprof and expvar give MemStats; a
// /metrics page gives what its Go collector exports).
//
// # Windows
//
// A [Window] is what happened between two samples: goroutines created per
// second, GC cycles per second, pause and scheduling-latency quantiles of the
// histogram deltas, the GC's and mark assist's share of busy CPU (only over
// at least two completed GC cycles, because the runtime's /cpu/classes
// counters move only when a cycle ends), mutex wait per second and the
// GODEBUG non-default events. The window layer computes it
// (window.RuntimeBetween), as it does every interval in gosleuth; this
// package only reads samples.
//
// # Traps (measured on Go 1.26)
//
//   - /cpu/classes/* move only at GC mark termination: read them across
//     at least two cycles and use /proc for the process's CPU.
//   - /sched/latencies:seconds records about one transition in eight.
//   - /gc/heap/objects:objects includes unswept dead objects; HeapLive
//     (/gc/heap/live:bytes) is the last GC's marked heap.
//   - MemStats (pprof heap?debug=1, expvar) stop the world to read.
package goruntime
