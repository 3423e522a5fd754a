package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// maxCPU bounds the CPU numbers ParseCPUList accepts, so a malformed list
// ("0-4000000000") cannot become a huge allocation.
const maxCPU = 1 << 16

// ParseCPUList parses the kernel's CPU list format, as in
// /sys/devices/system/cpu/online and the Cpus_allowed_list line of
// /proc/PID/status ("0-3,8,10-11"), into CPU numbers in the list's order.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("parse CPU list: empty: %w", ErrParse)
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxCPU {
			return nil, fmt.Errorf("parse CPU list %q: %w", s, ErrParse)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxCPU {
				return nil, fmt.Errorf("parse CPU list %q: bad range %q: %w", s, part, ErrParse)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// OnlineCPUs returns the CPUs the kernel has online (from sysfs), which is
// the host's CPU count whatever this process's own affinity: Go's
// runtime.NumCPU counts only the CPUs gosleuth itself may run on, wrong
// under taskset or a cpuset.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("list online CPUs: %w", err)
	}
	return ParseCPUList(string(b))
}
