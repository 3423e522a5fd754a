package goruntime

import (
	"os"
	"testing"
)

// FuzzParsers feeds one input to the parsers of what a runtime endpoint
// returns (a /metrics page, a goroutine dump, the heap profile's MemStats):
// the endpoint may be anyone's program, so no input may panic.
func FuzzParsers(f *testing.F) {
	if b, err := os.ReadFile("testdata/goroutines.txt"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("# TYPE go_goroutines gauge\ngo_goroutines 12\ngo_gc_duration_seconds{quantile=\"0.5\"} 1e-05\n" +
		"go_sched_latencies_seconds_bucket{le=\"+Inf\"} 3\nx{a=\"\\\"\",b=\"c\"} NaN\n"))
	f.Add([]byte("# runtime.MemStats\n# Alloc = 123\n# HeapAlloc = 12\n# NextGC = 4194304\n# NumGC = 7\n# PauseNs = [1 2 3]\n"))
	f.Add([]byte("goroutine 1 [running]:\nmain.main()\n\t/a/b.go:12 +0x1d\ncreated by main.x in goroutine 1\n\t/a/c.go:3 +0x4\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseProm(b)
		ParseGoroutines(b)
		parseHeapMemStats(b)
	})
}
