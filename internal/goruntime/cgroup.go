package goruntime

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// cgroupMount is a mounted cgroup hierarchy holding the CPU controller.
type cgroupMount struct {
	version int
	root    string // the hierarchy path mounted there
	point   string // where it is mounted
}

// readCgroupCPU finds the process's CPU cgroup and reads its limit (the
// smallest along the path to the root, as the Go runtime does) and its
// throttling counters. It reads through procRoot/PID/root so the mount
// points are those of the process; when that is not accessible (it needs
// the right to ptrace the process), the host's view is tried.
func readCgroupCPU(fs proc.FS, pid int, f *Facts) CgroupCPU {
	var c CgroupCPU
	dir := fs.PID(pid)
	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		f.note("cgroup unreadable: %v", err)
		return c
	}
	mi, err := os.ReadFile(filepath.Join(dir, "mountinfo"))
	if err != nil {
		f.note("mountinfo unreadable: %v", err)
		return c
	}
	mounts := parseCgroupMounts(mi)
	v1Path, v2Path, hasV1, hasV2 := parseCgroupFile(cg)
	var m cgroupMount
	var p string
	for _, mm := range mounts {
		if mm.version == 1 && hasV1 {
			m, p = mm, v1Path
			break
		}
	}
	if m.version == 0 {
		for _, mm := range mounts {
			if mm.version == 2 && hasV2 {
				m, p = mm, v2Path
				break
			}
		}
	}
	if m.version == 0 {
		return c
	}
	c.Version, c.Path = m.version, p
	rel := p
	if m.root != "/" && strings.HasPrefix(p, m.root) {
		rel = strings.TrimPrefix(p, m.root)
	}
	base := filepath.Join(dir, "root", m.point)
	if _, err := os.Stat(base); err != nil && fs.Root() == proc.NewFS("").Root() {
		base = m.point
	}
	// Walk from the process's cgroup up to the mount's root.
	for cur := path.Clean("/" + rel); ; cur = path.Dir(cur) {
		d := filepath.Join(base, cur)
		if lim, ok := readCPULimit(d, m.version); ok && (c.Limit == 0 || lim < c.Limit) {
			c.Limit = lim
		}
		if cur == "/" {
			break
		}
	}
	if st, err := os.ReadFile(filepath.Join(base, rel, "cpu.stat")); err == nil {
		parseCPUStat(st, &c)
	}
	return c
}

// parseCgroupMounts picks the cgroup2 mounts and the cgroup v1 mounts with
// the cpu controller out of a mountinfo file.
func parseCgroupMounts(b []byte) []cgroupMount {
	var out []cgroupMount
	for line := range bytes.Lines(b) {
		pre, post, ok := bytes.Cut(line, []byte(" - "))
		if !ok {
			continue
		}
		pf, qf := strings.Fields(string(pre)), strings.Fields(string(post))
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		switch qf[0] {
		case "cgroup2":
			out = append(out, cgroupMount{2, pf[3], pf[4]})
		case "cgroup":
			for _, o := range strings.Split(qf[2], ",") {
				if o == "cpu" {
					out = append(out, cgroupMount{1, pf[3], pf[4]})
				}
			}
		}
	}
	return out
}

// parseCgroupFile returns the v1 cpu controller's path and the v2 path
// from /proc/PID/cgroup.
func parseCgroupFile(b []byte) (v1, v2 string, hasV1, hasV2 bool) {
	for line := range bytes.Lines(b) {
		parts := strings.SplitN(strings.TrimSpace(string(line)), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if ctl == "cpu" {
				v1, hasV1 = parts[2], true
			}
		}
	}
	return
}

// readCPULimit reads a cgroup directory's CPU limit in CPUs.
func readCPULimit(dir string, version int) (float64, bool) {
	if version == 2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return 0, false
		}
		return parseCPUMax(b)
	}
	q, err1 := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	p, err2 := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	quota, err1 := strconv.ParseInt(strings.TrimSpace(string(q)), 10, 64)
	period, err2 := strconv.ParseInt(strings.TrimSpace(string(p)), 10, 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0, false
	}
	return float64(quota) / float64(period), true
}

// parseCPUMax parses cgroup v2 cpu.max ("max 100000" or "150000 100000").
func parseCPUMax(b []byte) (float64, bool) {
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] == "max" {
		return 0, false
	}
	quota, err1 := strconv.ParseInt(f[0], 10, 64)
	period, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0, false
	}
	return float64(quota) / float64(period), true
}

// parseCPUStat reads the throttling counters of cpu.stat (v1 throttled_time
// is in ns, v2 throttled_usec in µs).
func parseCPUStat(b []byte, c *CgroupCPU) {
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "nr_periods":
			c.Periods = v
		case "nr_throttled":
			c.Throttled = v
		case "throttled_usec":
			c.ThrottledSeconds = float64(v) / 1e6
		case "throttled_time":
			c.ThrottledSeconds = float64(v) / 1e9
		}
	}
}
