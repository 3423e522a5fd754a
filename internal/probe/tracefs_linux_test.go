package probe

import (
	"os"
	"testing"
)

// TestTracePages: each ring is a power of two from 128 to 2,048 pages,
// the largest whose rings all fit in traceRingBytes (the floor may exceed
// it: a ring smaller than 128 pages overflows at common rates).
func TestTracePages(t *testing.T) {
	page := os.Getpagesize()
	for _, fns := range []int{0, 1, 2, 3, 4, 5, 8, 19, 50} {
		for _, ncpu := range []int{1, 2, 4, 16, 64, 1024} {
			p := tracePages(fns, ncpu)
			rings := max(fns*ncpu, 1)
			switch {
			case p < 128 || p > 2048 || p&(p-1) != 0:
				t.Errorf("tracePages(%d, %d) = %d: want a power of two in [128, 2048]", fns, ncpu, p)
			case p > 128 && p*page*rings > traceRingBytes:
				t.Errorf("tracePages(%d, %d) = %d: %d rings take %d bytes, over %d", fns, ncpu, p, rings, p*page*rings, traceRingBytes)
			case p < 2048 && 2*p*page*rings <= traceRingBytes:
				t.Errorf("tracePages(%d, %d) = %d: %d would fit too", fns, ncpu, p, 2*p)
			}
		}
	}
	// One hot function on two CPUs, the exact-count test's case, gets the
	// largest rings with 4 KiB pages.
	if page == 4096 && tracePages(1, 2) != 2048 {
		t.Errorf("tracePages(1, 2) = %d, want 2048", tracePages(1, 2))
	}
}
