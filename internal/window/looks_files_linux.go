package window

import (
	"context"
	"fmt"
	"time"

	"github.com/gosleuth/gosleuth/internal/syscalls"
)

// openatFiles counts the files pid opens for d, by path, from its openat
// calls.
func openatFiles(ctx context.Context, pid int, d time.Duration) (*Files, error) {
	o, err := syscalls.NewOpenPaths(pid)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	start := time.Now()
	sleepCtx(ctx, d)
	paths, total, err := o.Read()
	if err != nil {
		return nil, fmt.Errorf("count opened files: %w", err)
	}
	f := &Files{Method: "openat", Seconds: time.Since(start).Seconds(), Opens: total}
	counts := map[string]float64{}
	for _, p := range paths {
		counts[p.Path] = float64(p.Count)
		f.Caught += int(p.Count)
	}
	if f.Caught > 0 {
		f.Paths = shares(counts, float64(f.Caught))
	}
	return f, nil
}
