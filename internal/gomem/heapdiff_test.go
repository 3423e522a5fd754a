package gomem

import (
	"slices"
	"testing"
)

func TestHeapProfileSince(t *testing.T) {
	rec := func(stack []uint64, ao, ab, fo, fb int64) HeapRecord {
		return HeapRecord{Stack: stack, AllocObjects: ao, AllocBytes: ab, FreeObjects: fo, FreeBytes: fb}
	}
	a, b, c := []uint64{1, 2}, []uint64{3}, []uint64{4, 5}
	tests := []struct {
		name       string
		prev, now  []HeapRecord
		want       []HeapRecord
		wantShrank int
	}{
		{"growth", []HeapRecord{rec(a, 10, 320, 4, 128)}, []HeapRecord{rec(a, 30, 960, 5, 160)}, []HeapRecord{rec(a, 20, 640, 1, 32)}, 0},
		{"new bucket kept whole", nil, []HeapRecord{rec(b, 3, 96, 0, 0)}, []HeapRecord{rec(b, 3, 96, 0, 0)}, 0},
		{"unchanged bucket dropped", []HeapRecord{rec(a, 10, 320, 4, 128)}, []HeapRecord{rec(a, 10, 320, 4, 128)}, nil, 0},
		{"frees only", []HeapRecord{rec(a, 10, 320, 4, 128)}, []HeapRecord{rec(a, 10, 320, 9, 288)}, []HeapRecord{rec(a, 0, 0, 5, 160)}, 0},
		{"torn read left out", []HeapRecord{rec(c, 10, 320, 4, 128)}, []HeapRecord{rec(c, 9, 288, 4, 128)}, nil, 1},
		// One stack, two object sizes: two buckets of the runtime.
		{"same stack, other size", []HeapRecord{rec(a, 10, 320, 0, 0)}, []HeapRecord{rec(a, 10, 320, 0, 0), rec(a, 2, 128, 0, 0)}, []HeapRecord{rec(a, 2, 128, 0, 0)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := &HeapProfile{Rate: 512 << 10, GCCycles: 7, Records: tt.now}
			d, shrank := now.Since(&HeapProfile{Records: tt.prev})
			if shrank != tt.wantShrank {
				t.Errorf("shrank %d, want %d", shrank, tt.wantShrank)
			}
			if d.Rate != now.Rate || d.GCCycles != now.GCCycles {
				t.Errorf("rate %d cycles %d, want the later reading's %d %d", d.Rate, d.GCCycles, now.Rate, now.GCCycles)
			}
			if !slices.EqualFunc(d.Records, tt.want, func(x, y HeapRecord) bool {
				return slices.Equal(x.Stack, y.Stack) && x.AllocObjects == y.AllocObjects && x.AllocBytes == y.AllocBytes && x.FreeObjects == y.FreeObjects && x.FreeBytes == y.FreeBytes
			}) {
				t.Errorf("records %+v, want %+v", d.Records, tt.want)
			}
		})
	}
}
