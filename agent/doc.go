// Package agent lets gosleuth read a running Go program from the inside:
// the full runtime/metrics catalog of the Go version it was built with, its
// goroutine, heap, allocs, mutex, block and threadcreate profiles, a CPU
// profile, and, when enabled, an execution-trace snapshot from a
// runtime/trace FlightRecorder.
//
// # Use
//
// One line in main:
//
//	defer agent.Start(agent.Options{})()
//
// or, to see the error:
//
//	a, err := agent.Listen(agent.Options{})
//	if err != nil { ... }
//	defer a.Close()
//
// Then, from the same machine, as the same user or root:
//
//	gosleuth inspect --pid PID
//
// # What it costs
//
// Nothing while nobody asks: the agent is one goroutine blocked in accept on
// a Unix socket (parked in the network poller, no timer, no polling), so an
// idle program gets no extra wake-ups. A metrics read takes one
// runtime/metrics.Read of the whole catalog (tens of microseconds, no
// stop-the-world) and reuses its buffers. Profiles cost what runtime/pprof
// costs: a goroutine profile stops the world for a moment, a CPU profile
// samples at 100 Hz for the seconds asked for. The FlightRecorder, when
// enabled, keeps the execution tracer running all the time (a few percent
// of CPU in allocation- and scheduling-heavy programs, plus its buffer), so
// it is off unless Options.FlightRecorder is set.
//
// # Security
//
// The agent listens on a Unix socket only, never on the network. The socket
// is created with mode 0600 in a per-user directory with mode 0700:
// $XDG_RUNTIME_DIR/gosleuth when XDG_RUNTIME_DIR is set, /tmp/gosleuth-UID
// otherwise, and named PID.sock. The agent refuses a directory that is not
// a real directory owned by its user with no group or other permissions.
// At start it removes sockets in that directory left by agents that died
// without Close (named after a PID no process has, and refusing
// connections).
// Only the program's user and root can connect. Nothing the agent serves
// changes the program's state: there is no remote GC, no SetGCPercent, no
// change of profiling rates. The mutex and block profiles are therefore
// empty unless the program itself calls runtime.SetMutexProfileFraction or
// runtime.SetBlockProfileRate.
//
// # Protocol
//
// HTTP/1.1 over the socket. GET /gosleuth/v1/info and /gosleuth/v1/metrics
// (text, see gosleuth's internal/goruntime/wire), /debug/pprof/NAME?debug=N
// as net/http/pprof serves them, /debug/pprof/profile?seconds=N (at most
// Options.MaxCPUProfile), and /gosleuth/v1/trace for the FlightRecorder
// snapshot.
package agent
