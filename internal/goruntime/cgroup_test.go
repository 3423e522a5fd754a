//go:build linux

package goruntime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestCgroupQuota puts a busy patient in a cgroup limited to a tenth of a CPU and
// checks the limit, the throttling counters and the GOMAXPROCS discovery
// says it runs with, against the runtime's own value. Needs root and a
// writable cgroup CPU controller (v1 cpu, or v2 with cpu enabled).
func TestCgroupQuota(t *testing.T) {
	testenv.Require(t, testenv.Root)
	name := "gosleuth-test-" + strconv.Itoa(os.Getpid())
	var dir string
	var v1 bool
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
		dir, v1 = filepath.Join("/sys/fs/cgroup/cpu", name), true
	case fileExists("/sys/fs/cgroup/cgroup.controllers") && fileExists("/sys/fs/cgroup/cpu.stat"):
		dir = filepath.Join("/sys/fs/cgroup", name)
	default:
		testenv.Missing(t, testenv.Root, "no writable cgroup CPU controller found")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		testenv.Missing(t, testenv.Root, "cannot create a cgroup: "+err.Error())
	}
	defer os.Remove(dir)
	var err error
	if v1 {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte("10000"), 0)
	} else {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("10000 100000"), 0)
	}
	if err != nil {
		testenv.Missing(t, testenv.Root, "cannot set a CPU limit: "+err.Error())
	}
	p := startPatient(t, nil, nil, "-mode", "gc", "-agent")
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0); err != nil {
		t.Fatalf("move patient into the cgroup: %v", err)
	}
	defer func() {
		// Move it back out so the cgroup can be removed.
		parent := filepath.Dir(dir)
		os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(p.pid())), 0)
	}()
	src := connectAgent(t, p.pid())
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := Discover("/proc", p.pid())
		if err != nil {
			t.Fatal(err)
		}
		s, err := src.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c := f.Cgroup
		ok := c.Limit == 0.1 && c.Throttled > 0 && c.ThrottledSeconds > 0 && int(s.GOMAXPROCS) == f.GOMAXPROCS
		if ok || time.Now().After(deadline) {
			t.Logf("cgroup v%d %s: limit %g CPUs, throttled %d of %d periods (%.2fs); GOMAXPROCS %d (%s), runtime %d",
				c.Version, c.Path, c.Limit, c.Throttled, c.Periods, c.ThrottledSeconds, f.GOMAXPROCS, f.GOMAXPROCSFrom, s.GOMAXPROCS)
			if !ok {
				t.Error("limit, throttling or GOMAXPROCS not as expected")
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
