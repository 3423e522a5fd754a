// Package load is gosleuth's open-loop HTTP load generator: a fixed rate or
// a step ramp, latency measured the honest way, the target process watched
// at every step, and a search for the highest rate that meets an SLA.
//
// # Open loop done right
//
// One pacer computes each request's intended send time (t0 + i/rate within
// a step) and hands it to a fixed pool of workers, one per connection. When
// every connection is busy the pacer waits: lag never opens connections
// beyond Config.Connections (vegeta's default answers lag with new
// connections and collapses). Each request is recorded three ways:
//
//   - corrected latency, from the intended send time to the end of the
//     response: what a user arriving on schedule would see (wrk2's model,
//     free of coordinated omission);
//   - uncorrected latency, from the actual send: what closed-loop tools
//     report;
//   - generator lag, from max(intended time, the moment the connection was
//     free) to the actual send: the generator's own lateness. A step whose
//     lag p99 exceeds 1 ms, or whose achieved rate is below 99% of its
//     target, is marked invalid, so a slow client is never reported as a
//     slow server.
//
// # Layout
//
// [Engine] owns the connections and runs one step at a time ([Engine.Step]);
// [Run] drives a fixed rate or a step ramp through it and [Search] the SLA
// search. Results are a [Report] of [StepResult] values plus a time series of
// [Tick] points, written as text, JSON, HDR histogram logs, CSV and a
// self-contained HTML page by the Write* functions.
//
// HTTP/1.1 over plain TCP uses a small keep-alive client written here (see
// http1.go for why); HTTPS and HTTP/2 (h2c or TLS) go through net/http with
// the connection count capped.
//
// # Watching the target
//
// With Config.Watch, the target process is read once per tick through
// package proc (CPU user/sys, RSS, threads, context switches) and, with
// Config.GC (a goruntime.Source: the gosleuth agent, a pprof or a /metrics
// endpoint, or its memory), its GC cycles and pauses. [FindListener] finds
// the local process listening on a port.
//
// # P99 spikes and GC cycles
//
// For a Go target, the runtime's GC clock is read from its memory every
// Config.GCPoll (package gomem: reads only, no stop), giving each cycle's
// start and end; the answers are cut into short windows by their intended
// send time. [GCSpikes] says how many P99 spikes begin within a GC cycle,
// how many would by chance, and mark assists' share of the GC's CPU there;
// the text report prints a line only when the spikes are tied to GC
// (gcspikes.go states the rules).
package load
