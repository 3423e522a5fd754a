package agent

import (
	"net/http/httptest"
	"runtime/metrics"
	"testing"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
)

// BenchmarkServeMetrics is the agent's own work for one metrics read: the
// whole runtime/metrics catalog read and encoded into a reused buffer.
func BenchmarkServeMetrics(b *testing.B) {
	a, err := Listen(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	req := httptest.NewRequest("GET", "/gosleuth/v1/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		a.serveMetrics(w, req)
	}
}

// BenchmarkReadCatalog is runtime/metrics.Read of the whole catalog alone,
// the part of a serve that runs inside the runtime.
func BenchmarkReadCatalog(b *testing.B) {
	s := newSamples()
	for b.Loop() {
		metrics.Read(s)
	}
}

// BenchmarkEncodeCatalog is the text encoding of one reading.
func BenchmarkEncodeCatalog(b *testing.B) {
	s := newSamples()
	metrics.Read(s)
	var buf []byte
	var enc wire.Encoder
	b.ReportAllocs()
	for b.Loop() {
		buf = enc.AppendMetrics(buf[:0], s)
	}
}

func newSamples() []metrics.Sample {
	d := metrics.All()
	s := make([]metrics.Sample, len(d))
	for i := range s {
		s[i].Name = d[i].Name
	}
	return s
}
