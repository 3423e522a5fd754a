package load

import (
	"bufio"
	"bytes"
	"testing"
)

// BenchmarkReadResponse measures the lean client's parser on a typical
// small keep-alive reply; it must not allocate.
func BenchmarkReadResponse(b *testing.B) {
	one := []byte("HTTP/1.1 200 OK\r\nDate: Sun, 22 Nov 2026 10:00:00 GMT\r\nContent-Length: 6\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\n\r\nhello\n")
	stream := bytes.Repeat(one, 1024)
	r := bytes.NewReader(stream)
	br := bufio.NewReaderSize(r, 16<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(one)))
	i := 0
	for b.Loop() {
		if i%1024 == 0 {
			r.Reset(stream)
			br.Reset(r)
		}
		i++
		if resp, err := readResponse(br, false); err != nil || resp.status != 200 {
			b.Fatalf("%+v %v", resp, err)
		}
	}
}

// BenchmarkRecord measures recording one request into a shard.
func BenchmarkRecord(b *testing.B) {
	sh := &shard{cur: newSample()}
	b.ReportAllocs()
	var t int64
	for b.Loop() {
		t += 50_000
		sh.record(t, t-1000, t+10_000, t+250_000, 200, nil)
	}
}
