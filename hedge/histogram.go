package hedge

import (
	"math"
	"math/bits"
	"time"
)

// Latencies are kept in a log-linear histogram of microseconds: values
// below 2^subBits µs get one bucket each, and every power of two above that
// is split into 2^subBits buckets, so a bucket's width is at most 1/16 of
// its lower bound (6.25% relative error).
const (
	subBits    = 4
	subCount   = 1 << subBits
	maxShift   = 30
	numBuckets = (maxShift + 1) * subCount // up to 2^34 µs, about 4.8 hours
)

// histogram counts latencies. The zero value is empty and ready to use. It
// is not safe for concurrent use.
type histogram struct {
	counts [numBuckets]uint32
	total  uint64
}

// bucketOf returns the bucket index of a latency.
func bucketOf(d time.Duration) int {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	shift := bits.Len64(us) - (subBits + 1)
	if shift < 0 {
		shift = 0
	}
	if shift > maxShift {
		return numBuckets - 1
	}
	return shift*subCount + int(us>>uint(shift))
}

// bucketUpper returns the largest latency that falls in bucket i.
func bucketUpper(i int) time.Duration {
	shift := i/subCount - 1
	if shift < 0 {
		shift = 0
	}
	lo := uint64(i - shift*subCount)
	us := (lo+1)<<uint(shift) - 1
	if us > math.MaxInt64/uint64(time.Microsecond) {
		return time.Duration(math.MaxInt64)
	}
	// Report the top of the bucket (plus the sub-microsecond part), so a
	// delay taken from a quantile errs on the late side.
	return time.Duration(us)*time.Microsecond + time.Microsecond - 1
}

// emptyHistogram is a read-only empty histogram for quantile2.
var emptyHistogram histogram

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.total++
}

func (h *histogram) reset() { *h = histogram{} }

// quantile2 returns the q-quantile of the union of a and b, and false when
// both are empty.
func quantile2(a, b *histogram, q float64) (time.Duration, bool) {
	total := a.total + b.total
	if total == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(total)))
	if rank < 1 {
		rank = 1
	}
	if rank > total {
		rank = total
	}
	var seen uint64
	for i := range numBuckets {
		seen += uint64(a.counts[i]) + uint64(b.counts[i])
		if seen >= rank {
			return bucketUpper(i), true
		}
	}
	return bucketUpper(numBuckets - 1), true
}
