//go:build linux

package perf

import (
	"testing"
)

// FuzzReadRecords walks arbitrary ring contents between arbitrary head and
// tail counters: the walk must end, never index outside the ring, and hand
// out bodies of the size their header claims.
func FuzzReadRecords(f *testing.F) {
	data := make([]byte, 64)
	pos := putRecord(data, 40, 9, []byte("abcdefgh"))
	pos = putRecord(data, pos, 2, make([]byte, 16))
	f.Add(data, uint64(40), pos)
	f.Add(make([]byte, 64), uint64(0), uint64(1<<63))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 8, 0}, ^uint64(0)-3, uint64(4))
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64) {
		// The kernel's ring is a power of two of at least one header.
		size := 8
		for size*2 <= len(data) && size < 1<<16 {
			size *= 2
		}
		if len(data) < size {
			return
		}
		data = data[:size]
		var got uint64
		newTail, n, _ := readRecords(data, head, tail, nil, func(_ uint32, _ uint16, body []byte) {
			got += uint64(len(body)) + recordHeaderSize
		})
		if head-tail < recordHeaderSize {
			if n != 0 {
				t.Fatalf("%d records from %d bytes", n, head-tail)
			}
			return
		}
		if newTail-tail > head-tail {
			t.Fatalf("tail moved %d bytes past head (%d available)", newTail-tail, head-tail)
		}
		if newTail != head && got != newTail-tail {
			t.Fatalf("records cover %d bytes, tail moved %d", got, newTail-tail)
		}
	})
}
