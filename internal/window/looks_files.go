package window

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// FilesLook names the files a process opens over and over, whatever opens
// them (a constant path or one built per call, Go or not): as root with
// BPF, by counting its openat calls by path (exact, about a microsecond
// per call); otherwise by listing its descriptors every few milliseconds
// and counting, by path, the files caught open in one listing and not in
// the one before, which costs the target nothing but the kernel's lock on
// its descriptor table during each listing, and catches a file open for
// microseconds only now and then.
type FilesLook struct {
	// ProcRoot is the procfs mount the target is read through ("" is /proc).
	ProcRoot string
	// Every is the pause between listings (default 5 ms). A listing that
	// takes long (a process with many descriptors) stretches it to 20
	// times the listing's own time, so the look stays under 5% of a core.
	Every time.Duration
}

// Source implements Look.
func (FilesLook) Source() Source { return SourceFDs }

// Look implements Look.
func (l FilesLook) Look(ctx context.Context, pid int, d time.Duration, w *Window) error {
	every := l.Every
	if every <= 0 {
		every = 5 * time.Millisecond
	}
	// Leave the end of the look for the other sources' last reads.
	d -= 500 * time.Millisecond
	if d < 200*time.Millisecond {
		return nil
	}
	fs := proc.NewFS(l.ProcRoot)
	if fs.Root() == proc.NewFS("").Root() {
		// The BPF program filters on the thread group as the kernel's
		// own PID namespace numbers it: only for the host's /proc.
		if f, err := openatFiles(ctx, pid, d); err == nil {
			w.Files = f
			return nil
		}
	}
	s, err := fs.NewFDScanner(pid)
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	defer s.Close()
	counts := map[string]float64{}
	caught, listings := 0, 0
	start := time.Now()
	end := start.Add(d)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			end = time.Now()
		case <-t.C:
		}
		if !time.Now().Before(end) {
			break
		}
		t0 := time.Now()
		err := s.Scan(func(fd int, target string) {
			if strings.HasPrefix(target, "/") {
				counts[target]++
				caught++
			}
		})
		if errors.Is(err, proc.ErrProcessGone) {
			break // what was caught so far stands
		}
		if err != nil {
			return err
		}
		listings++
		t.Reset(max(every, 20*time.Since(t0)))
	}
	f := &Files{Method: "listings", Seconds: time.Since(start).Seconds(), Listings: listings, Caught: caught}
	if caught > 0 {
		f.Paths = shares(counts, float64(caught))
	}
	w.Files = f
	return nil
}
