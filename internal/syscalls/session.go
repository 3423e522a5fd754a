package syscalls

import (
	"io"
	"os/exec"
	"time"
)

// source is one way of counting: exact counters or /proc sampling.
type source interface {
	// tick is called every 10 ms: follow threads, take samples.
	tick(now time.Time)
	// stop ends counting; report still works.
	stop() error
	// report fills r with what was counted since the start.
	report(r *Report, seconds float64) error
	// held is the perf events and tracepoints still open.
	held() (fds, tracepoints int)
	close()
}

// Session is one counting run of a target, driven by a view (the syscalls
// command's live table, the doctor's close look): Start it, Tick it about
// every 10 ms (threads are followed and /proc sampled there), Read a report
// whenever one is wanted, Finish at the end and Close.
type Session struct {
	cfg    Config
	r      *Report
	src    source
	cmd    *exec.Cmd
	exited <-chan struct{}
	start  time.Time
}

// Start opens the counting of cfg's target: cfg.Command is started stopped
// at its exec (its output goes to stdout and stderr) and let run once
// counting is attached; otherwise cfg.PID is counted. On other systems
// than Linux it returns ErrNotSupported.
func Start(cfg Config, stdout, stderr io.Writer) (*Session, error) {
	return startSession(cfg, stdout, stderr)
}

// Target is the report's header so far: the process, its threads at
// attach and the counting mode.
func (s *Session) Target() *Report { return s.r }

// Exited is closed when the target exits.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Tick follows threads and takes samples; call it about every 10 ms.
func (s *Session) Tick(now time.Time) { s.src.tick(now) }

// Read returns the report of what was counted since the start. The report
// is the session's own, updated by each Read and Finish.
func (s *Session) Read() (*Report, error) {
	err := s.src.report(s.r, time.Since(s.start).Seconds())
	return s.r, err
}

// Finish stops counting and returns the final report; exited says the
// target exited (its exit status is then in the report when Start ran it),
// note is added to the report's notes when set ("interrupted").
func (s *Session) Finish(exited bool, note string) (*Report, error) {
	seconds := time.Since(s.start).Seconds()
	if note != "" {
		s.r.Notes = append(s.r.Notes, note)
	}
	if err := s.src.stop(); err != nil {
		return nil, err
	}
	if exited {
		s.r.Exited = true
		if code, ok := s.exitCode(); ok {
			s.r.ExitCode = &code
		}
	}
	if err := s.src.report(s.r, seconds); err != nil {
		return nil, err
	}
	return s.r, nil
}

// Held is the perf events and tracepoints the session still holds (their
// release takes the kernel an RCU grace period per tracepoint).
func (s *Session) Held() (fds, tracepoints int) { return s.src.held() }

// exitCode is the command's exit status once it has been waited for.
func (s *Session) exitCode() (int, bool) {
	if s.cmd == nil || s.cmd.ProcessState == nil {
		return 0, false
	}
	return s.cmd.ProcessState.ExitCode(), true
}

// Close releases everything the session holds.
func (s *Session) Close() { s.src.close() }

// Detach is Close for a caller about to exit: releasing exact counters
// makes the kernel wait a grace period per tracepoint (some 10 s for every
// syscall), which Detach leaves to the counters' releaser process, so the
// caller can exit at once.
func (s *Session) Detach() {
	if d, ok := s.src.(interface{ detach() }); ok {
		d.detach()
		return
	}
	s.src.close()
}
