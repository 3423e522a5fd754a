package goruntime

import (
	"runtime/metrics"
	"testing"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
)

// BenchmarkParseAgentMetrics is gosleuth's cost to decode one agent reply
// holding the whole Go 1.26 catalog.
func BenchmarkParseAgentMetrics(b *testing.B) {
	descs := metrics.All()
	s := make([]metrics.Sample, len(descs))
	for i := range s {
		s[i].Name = descs[i].Name
	}
	metrics.Read(s)
	var enc wire.Encoder
	buf := enc.AppendMetrics(wire.AppendHeader(nil, 1, 1, "go1.26.8"), s)
	// "kept" is a source's decoder, which parses bucket boundaries once;
	// "fresh" parses them on every reply.
	for _, keep := range []bool{true, false} {
		name := map[bool]string{true: "kept", false: "fresh"}[keep]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			var d metricsDecoder
			for b.Loop() {
				if !keep {
					d = metricsDecoder{}
				}
				if _, _, _, _, err := d.decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
