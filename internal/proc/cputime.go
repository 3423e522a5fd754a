package proc

import "math/bits"

// nsTicks converts the kernel's nanoseconds to the ClockTicks /proc shows,
// truncating as its nsec_to_clock_t does.
func nsTicks(ns uint64) uint64 { return ns / (1e9 / ClockTicks) }

// cputime is a task's run time split between user and system mode, in
// nanoseconds.
type cputime struct{ u, s uint64 }

// adjust splits rtime, a task's exact run time, between user and system
// mode in the ratio of its tick-sampled utime and stime, never moving
// either back from the last split, prev, which it then updates; it returns
// the new split. This is the kernel's cputime_adjust (kernel/sched/
// cputime.c), the split /proc's stat shows: computed here because the
// iterator reads the three counters, not stat's result, and kept per task
// in gosleuth as the kernel keeps it per task (or per thread group) for
// its readers.
func (prev *cputime) adjust(rtime, utime, stime uint64) cputime {
	if prev.u+prev.s >= rtime {
		return *prev // no new run time (or a reading out of order)
	}
	switch {
	case stime == 0:
		// No system tick yet: all user time, until ticks say otherwise.
	case utime == 0:
		stime = rtime
	default:
		// stime * rtime / (stime + utime), in 128 bits: stime <=
		// stime+utime, so the quotient fits in 64.
		hi, lo := bits.Mul64(stime, rtime)
		sum := stime + utime
		if sum < stime || hi >= sum {
			stime = rtime // sum overflowed: not in a real counter
		} else {
			stime, _ = bits.Div64(hi, lo, sum)
		}
		stime = min(stime, rtime)
	}
	stime = max(stime, prev.s)
	utime = rtime - stime
	if utime < prev.u {
		utime = prev.u
		stime = rtime - utime
	}
	*prev = cputime{utime, stime}
	return *prev
}
