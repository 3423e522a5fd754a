package compare

import (
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setupCPUs decides the CPUs started processes run on.
func (r *runner) setupCPUs(commands bool) error {
	p := &r.res.Protocol
	if !commands {
		p.Pinning = "not changed (running processes): " + r.affinityNote()
		return nil
	}
	cpus := r.cfg.CPUs
	if len(cpus) == 0 {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return fmt.Errorf("compare: read CPU affinity: %w", err)
		}
		for i := range 1024 {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
	}
	r.cpus = cpus
	p.Pinning = fmt.Sprintf("every side on CPUs %s (sched_setaffinity on the thread that forks each command, inherited by all its threads and children)", cpuList(cpus))
	return nil
}

// affinityNote reads the running processes' CPU lists for the report.
func (r *runner) affinityNote() string {
	var parts []string
	for _, s := range r.res.Sides {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(s.PID, &set); err != nil {
			continue
		}
		var cpus []int
		for i := range 1024 {
			if set.IsSet(i) {
				cpus = append(cpus, i)
			}
		}
		parts = append(parts, fmt.Sprintf("%s on CPUs %s", s.Name, cpuList(cpus)))
	}
	return strings.Join(parts, ", ")
}

func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", cpus[i], cpus[j])
		} else {
			fmt.Fprintf(&b, "%d", cpus[i])
		}
		i = j + 1
	}
	return b.String()
}

// processCPU is the CPU time this process has used, all threads, to the
// nanosecond (CLOCK_PROCESS_CPUTIME_ID: the scheduler's run time, not
// clock ticks); 0 where the clock cannot be read.
func processCPU() time.Duration { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID);
// the caller locks its goroutine to the thread.
func threadCPU() time.Duration { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

func cpuClock(id int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
