package window

import (
	"context"
	"fmt"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// Look implements Look.
func (l SyscallsLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	// Attaching can wait on the kernel's tracepoint mutex for as long as
	// another process takes to release its own events (minutes were seen
	// on a host shared with other tracers): the verdict does not wait for
	// it. A counter attached after the window is closed when it comes.
	type attached struct {
		e   *syscalls.Exact
		err error
	}
	done := make(chan attached, 1)
	go func() {
		e, err := syscalls.CountExact(pid, syscalls.ExactOptions{FS: proc.NewFS(l.ProcRoot)})
		done <- attached{e, err}
	}()
	var e *syscalls.Exact
	select {
	case a := <-done:
		if a.err != nil {
			return a.err
		}
		e = a.e
	case <-ctx.Done():
		release := holdRelease(ctx)
		go func() {
			defer release()
			if a := <-done; a.e != nil {
				a.e.Close()
			}
		}()
		return fmt.Errorf("count syscalls: attaching did not finish within the window (the kernel's tracepoint lock was held, by another tracer releasing its events)")
	}
	start := time.Now()
	sleepCtx(ctx, d)
	r, rerr := e.Read()
	sec := time.Since(start).Seconds()
	// Release in the background: the verdict need not wait for the
	// kernel's grace periods, and the descriptors are close-on-exec and
	// freed with the process in any case. A Collect measuring the target's
	// CPU after the looks (QuietCPU) waits for the release, which the
	// target pays for until it ends.
	release := holdRelease(ctx)
	go func() {
		defer release()
		e.Close()
	}()
	if rerr != nil {
		return rerr
	}
	// Attaching can wait on the kernel (releasing other tracepoint events
	// holds a mutex): a window too short to count in is no evidence.
	if sec < min(1, d.Seconds()/2) {
		return fmt.Errorf("count syscalls: attached for only %.2f s of %.1f s", sec, d.Seconds())
	}
	counts := map[string]uint64{}
	for name, n := range r.ByName {
		if n > 0 {
			counts[name] = n
		}
	}
	w.Syscalls = &Syscalls{Seconds: sec, Counts: counts, Mechanism: e.Describe()}
	return nil
}
