//go:build linux

package syscalls

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestReleaserDisablesWhenItsOwnerEnds attaches to a patient calling
// getppid in two threads, then closes this process's end of the releaser's
// socket without a word, as the end of a killed gosleuth does, and
// requires the counts (read through this process's own references, which
// stay open) to stop moving within a second: the releaser disabled every
// event, inherited groups, per-thread groups and totals alike.
func TestReleaserDisablesWhenItsOwnerEnds(t *testing.T) {
	needPerf(t)
	tot, err := TotalEvent()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts CounterOptions
	}{
		{"inherited", CounterOptions{ThreadsOnly: true, Total: &tot}},
		{"per thread", CounterOptions{PerThread: true, Total: &tot}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPatient(t, "-threads", "2", "-calls", "2000000000")
			opts := tc.opts
			opts.Events = testEvents(t)
			c := attachGo(t, p, opts)
			if !c.rel.usable() {
				t.Fatalf("no releaser: %v", c.relErr)
			}
			if c.rel.held-c.rel.dropped != c.FDs() {
				t.Fatalf("the releaser holds %d descriptors, the counter %d", c.rel.held-c.rel.dropped, c.FDs())
			}
			read := func() []uint64 {
				sum := make([]uint64, len(opts.Events))
				total, _, err := c.Read(sum, false)
				if err != nil {
					t.Fatal(err)
				}
				return append(sum, total)
			}
			moving := func() bool {
				a := read()
				time.Sleep(50 * time.Millisecond)
				return !slices.Equal(a, read())
			}
			if !moving() {
				t.Fatal("the counts do not move while attached: the check below proves nothing")
			}
			c.rel.close()
			start := time.Now()
			for moving() {
				if time.Since(start) > time.Second {
					t.Fatalf("still counting %v after this process's end of the releaser closed", time.Since(start).Round(time.Millisecond))
				}
			}
			t.Logf("counting stopped within %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestCounterWithoutReleaser attaches with a releaser that cannot start:
// the counter counts all the same, and Detach, whose own releaser cannot
// start either, releases every event itself, as Close does.
func TestCounterWithoutReleaser(t *testing.T) {
	needPerf(t)
	exe := releaserExe
	releaserExe = "/nonexistent/gosleuth"
	t.Cleanup(func() { releaserExe = exe })
	p := startPatient(t, "-threads", "2", "-calls", "20000")
	evs := testEvents(t)
	c := attachGo(t, p, CounterOptions{Events: evs})
	if c.rel != nil || c.relErr == nil {
		t.Fatalf("a releaser started (%v) from a missing executable", c.relErr)
	}
	p.expect(t, "done")
	sum := make([]uint64, len(evs))
	if _, _, err := c.Read(sum, false); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Name == "getppid" && sum[i] != 40000 {
			t.Errorf("getppid counted %d times, want 40000", sum[i])
		}
	}
	var fds []int
	for _, g := range c.groups {
		fds = append(fds, g.fds...)
	}
	c.Detach()
	for _, fd := range append(fds, c.totals...) {
		if l, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); l == "anon_inode:[perf_event]" {
			t.Errorf("descriptor %d is a perf event still after Detach", fd)
		}
	}
}
