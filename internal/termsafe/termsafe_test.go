package termsafe

import (
	"bytes"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"patient", "patient"},
		{"tab\tand\nnewline", "tab\tand\nnewline"},
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x1b]52;c;ZWNobyBoaQ==\x07", `\x1b]52;c;ZWNobyBoaQ==\x07`},
		{"csi\u009b31m", `csi\u009b31m`},
		{"bad\xff\xfeutf8", `bad\xff\xfeutf8`},
		{"del\x7f", `del\x7f`},
		{"nul\x00", `nul\x00`},
		{"héllo 世界 🙂", "héllo 世界 🙂"},
		{"\r", `\x0d`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	n, err := w.Write([]byte("comm \x1b[31mred\n"))
	if err != nil || n != 14 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := b.String(); got != `comm \x1b[31mred`+"\n" {
		t.Errorf("wrote %q", got)
	}
}

func BenchmarkStringSafe(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		String("/usr/bin/prometheus-node-exporter --web.listen-address=:9100")
	}
}
