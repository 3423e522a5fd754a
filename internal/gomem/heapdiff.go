package gomem

import (
	"strconv"
	"strings"
)

// Key identifies the record's runtime bucket across readings: its stack
// and its object size (the runtime keeps one bucket per stack and size).
func (r HeapRecord) Key() string {
	var b strings.Builder
	for _, pc := range r.Stack {
		b.WriteString(strconv.FormatUint(pc, 16))
		b.WriteByte(',')
	}
	if r.AllocObjects > 0 {
		b.WriteString(strconv.FormatInt(r.AllocBytes/r.AllocObjects, 10))
	}
	return b.String()
}

// Since returns what h holds beyond prev, an earlier reading of the same
// process's profile, bucket by bucket: the allocations and frees the
// runtime counted between the two readings (as of the GCs that ended
// before each). Buckets counted less in h than in prev (a read torn by
// the runtime's own update) are left out; shrank says how many.
func (h *HeapProfile) Since(prev *HeapProfile) (d *HeapProfile, shrank int) {
	before := make(map[string]HeapRecord, len(prev.Records))
	for _, rec := range prev.Records {
		before[rec.Key()] = rec
	}
	d = &HeapProfile{Time: h.Time, Rate: h.Rate, GCCycles: h.GCCycles}
	for _, rec := range h.Records {
		old, ok := before[rec.Key()]
		if !ok && rec.AllocObjects == 0 {
			continue
		}
		r := HeapRecord{Stack: rec.Stack, AllocObjects: rec.AllocObjects - old.AllocObjects,
			AllocBytes: rec.AllocBytes - old.AllocBytes, FreeObjects: rec.FreeObjects - old.FreeObjects,
			FreeBytes: rec.FreeBytes - old.FreeBytes}
		if r.AllocObjects < 0 || r.AllocBytes < 0 || r.FreeObjects < 0 || r.FreeBytes < 0 {
			shrank++
			continue
		}
		if r.AllocObjects == 0 && r.FreeObjects == 0 {
			continue
		}
		d.Records = append(d.Records, r)
	}
	return d, shrank
}
