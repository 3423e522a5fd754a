package hedge

import "sync/atomic"

// tokenUnit is one hedge in the budget's fixed-point token count.
const tokenUnit = 1 << 20

// budget is a token bucket credited by real requests: each request adds
// ratio tokens, each extra attempt takes one, and the bucket holds at most
// burst tokens. It starts full. Over any stretch of traffic, extra attempts
// therefore never exceed burst + ratio x requests.
type budget struct {
	tokens atomic.Int64 // in 1/tokenUnit of a token
	credit int64        // per request
	limit  int64        // burst, in 1/tokenUnit
}

func newBudget(ratio float64, burst int) *budget {
	b := &budget{credit: int64(ratio * tokenUnit), limit: int64(burst) * tokenUnit}
	b.tokens.Store(b.limit)
	return b
}

// deposit credits one real request. When the bucket is full it only loads
// the counter, so a busy client with a quiet budget does not contend on it.
func (b *budget) deposit() {
	for {
		v := b.tokens.Load()
		if v >= b.limit {
			return
		}
		n := min(v+b.credit, b.limit)
		if b.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// withdraw takes one token for an extra attempt and reports whether there
// was one.
func (b *budget) withdraw() bool {
	for {
		v := b.tokens.Load()
		if v < tokenUnit {
			return false
		}
		if b.tokens.CompareAndSwap(v, v-tokenUnit) {
			return true
		}
	}
}

// refund returns a token taken for an attempt that was never sent.
func (b *budget) refund() {
	for {
		v := b.tokens.Load()
		n := min(v+tokenUnit, b.limit)
		if b.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}
