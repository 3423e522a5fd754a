package units

import "testing"

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{
		{0, "0"},
		{1023, "1023"},
		{1024, "1.0K"},
		{1536, "1.5K"},
		{10*1024 - 1, "10K"}, // 9.999K rounds to 10, shown without a decimal
		{12_900_000, "12M"},
		{1_700_000, "1.6M"},
		{1023 * 1024 * 1024, "1023M"},
		{1024*1024*1024 - 1, "1.0G"}, // not "1024M"
		{3 << 40, "3.0T"},
		{1 << 62, "4096P"},
	} {
		if got := Bytes(tc.in); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{9999, "9999"},
		{12_500, "12.5k"},
		{1_234_000, "1.23M"},
		{4_560_000_000, "4.56G"},
	} {
		if got := Count(tc.in); got != tc.want {
			t.Errorf("Count(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "thread", "0 threads"},
		{1, "thread", "1 thread"},
		{2, "thread", "2 threads"},
		{1, "process", "1 process"},
		{3, "process", "3 processes"},
		{2, "CPU", "2 CPUs"},
	} {
		if got := Plural(tc.n, tc.noun); got != tc.want {
			t.Errorf("Plural(%d, %q) = %q, want %q", tc.n, tc.noun, got, tc.want)
		}
	}
}
