package stacks

import (
	"encoding/binary"
	"testing"
)

// FuzzParseSample feeds arbitrary PERF_RECORD_SAMPLE bodies to the sample
// parser: lengths inside a record (the call chain's nr, the user stack's
// size) come from the ring and must be checked before they are used.
func FuzzParseSample(f *testing.F) {
	rec := make([]byte, 32+3*8+8+8)
	le := binary.NativeEndian
	le.PutUint32(rec[12:], 42)
	le.PutUint64(rec[16:], 1000)
	le.PutUint64(rec[24:], 3)
	le.PutUint64(rec[32:], contextMax+1)
	le.PutUint64(rec[40:], 0x401000)
	le.PutUint64(rec[48:], 0x402000)
	f.Add(rec)
	huge := append([]byte(nil), rec...)
	le.PutUint64(huge[len(huge)-8:], ^uint64(0)-4) // stack size near 2^64
	f.Add(huge)
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &sampler{raw: &Raw{}}
		s.parseSample(b)
		if len(s.kern)+len(s.user) > len(b)/8 {
			t.Fatalf("%d frames from %d bytes", len(s.kern)+len(s.user), len(b))
		}
	})
}
