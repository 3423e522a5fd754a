package proc

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    statFields
		comm    string
		wantErr bool
	}{
		{
			name: "comm with a parenthesis and a space",
			in:   "8279 (a) b) S 1 8272 1406 0 -1 4194304 135 0 0 0 7 3 0 0 20 0 1 0 39658 2990080 413 18446744073709551615 94629569916928 94629569934857 140722770204336 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0\n",
			comm: "a) b",
			want: statFields{PID: 8279, State: 'S', PPID: 1, Flags: 4194304, MinFlt: 135, UTime: 7, STime: 3, Threads: 1, StartTime: 39658, RSSPages: 413, Processor: 1},
		},
		{
			name: "zombie",
			in:   "8286 (sleep) Z 8284 8272 1406 0 -1 4227084 117 0 0 0 0 0 0 0 20 0 1 0 39680 0 0 18446744073709551615 0 0 0 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
			comm: "sleep",
			want: statFields{PID: 8286, State: 'Z', PPID: 8284, Flags: 4227084, MinFlt: 117, Threads: 1, StartTime: 39680, Processor: 1},
		},
		{
			name: "kernel worker with a long name",
			in:   "11 (kworker/0:1-virtio_vsock) I 2 0 0 0 -1 69238880 0 0 0 0 0 12 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
			comm: "kworker/0:1-virtio_vsock",
			want: statFields{PID: 11, State: 'I', PPID: 2, Flags: 69238880, STime: 12, Threads: 1, StartTime: 5, Processor: 0},
		},
		{
			name: "comm that looks like fields",
			in:   "42 (x) R 1 2 3 (y)) S 7 1 1 1 -1 0 0 0 0 0 1 2 3 4 20 0 9 0 100 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0\n",
			comm: "x) R 1 2 3 (y)",
			want: statFields{PID: 42, State: 'S', PPID: 7, UTime: 1, STime: 2, CUTime: 3, CSTime: 4, Threads: 9, StartTime: 100, RSSPages: 5},
		},
		{name: "empty", in: "", wantErr: true},
		{name: "no parentheses", in: "1 init S 0", wantErr: true},
		{name: "truncated", in: "1 (init) S 0 1 1 0 -1 4194560 14346 0 636 20\n", wantErr: true},
		{name: "garbage number", in: "1 (init) S x 1 1 0 -1 4194560 14346 655442 0 636 20 5 1 1 20 0 11 0 13 123 1983 0\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got statFields
			err := parseStat([]byte(tt.in), &got)
			if tt.wantErr {
				if !errors.Is(err, ErrParse) {
					t.Fatalf("parseStat(%q) error = %v, want ErrParse", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseStat: %v", err)
			}
			if string(got.Comm) != tt.comm {
				t.Errorf("comm = %q, want %q", got.Comm, tt.comm)
			}
			got.Comm = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseStat =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestParseSmallFiles(t *testing.T) {
	run, wait, slices, err := parseSchedstat([]byte("520817 102079 2\n"))
	if err != nil || run != 520817 || wait != 102079 || slices != 2 {
		t.Errorf("parseSchedstat = %d %d %d %v", run, wait, slices, err)
	}
	if _, _, _, err := parseSchedstat([]byte("12 x\n")); !errors.Is(err, ErrParse) {
		t.Errorf("parseSchedstat(bad) error = %v", err)
	}
	status := "Name:\tcat\nState:\tR (running)\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n"
	vol, invol, err := parseStatusCtxsw([]byte(status))
	if err != nil || vol != 17 || invol != 4 {
		t.Errorf("parseStatusCtxsw = %d %d %v", vol, invol, err)
	}
	if _, _, err := parseStatusCtxsw([]byte("Name:\tx\n")); !errors.Is(err, ErrParse) {
		t.Errorf("parseStatusCtxsw(no fields) error = %v", err)
	}
	cr, cw, err := parseIO([]byte("rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 3\nread_bytes: 0\n"))
	if err != nil || cr != 10 || cw != 3 {
		t.Errorf("parseIO = %d %d %v", cr, cw, err)
	}
	if _, _, err := parseIO(nil); !errors.Is(err, ErrParse) {
		t.Errorf("parseIO(empty) error = %v", err)
	}
}

func TestParseLimits(t *testing.T) {
	head := "Limit                     Soft Limit           Hard Limit           Units     \n"
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"number", head + "Max open files            1024                 4096                 files     \n", 1024, false},
		{"unlimited", head + "Max open files            unlimited            unlimited            files     \n", Unlimited, false},
		{"missing", head + "Max processes             96365                96365                processes \n", 0, true},
		{"garbage", head + "Max open files            lots                 4096                 files     \n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLimitsNoFile([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseLimitsNoFile = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestAtou(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"12a", 0, false},
	}
	for _, tt := range tests {
		got, ok := atou([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("atou(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestParseFixtures parses every stat, status and schedstat captured from a
// real host under testdata/proc.
func TestParseFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/proc/*/task/*/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Base(f) {
		case "stat":
			var s statFields
			if err := parseStat(b, &s); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		case "status":
			if _, _, err := parseStatusCtxsw(b); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		case "schedstat":
			if _, _, _, err := parseSchedstat(b); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
}

var sinkStat statFields

func BenchmarkParseStat(b *testing.B) {
	in, err := os.ReadFile("testdata/proc/1/stat")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := parseStat(in, &sinkStat); err != nil {
			b.Fatal(err)
		}
	}
}

var sinkN uint64

func BenchmarkParseStatus(b *testing.B) {
	in, err := os.ReadFile("testdata/proc/1/status")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		v, i, err := parseStatusCtxsw(in)
		if err != nil {
			b.Fatal(err)
		}
		sinkN += v + i
	}
}

func BenchmarkParseSchedstat(b *testing.B) {
	in := []byte("520817 102079 2\n")
	b.ReportAllocs()
	for b.Loop() {
		r, w, s, _ := parseSchedstat(in)
		sinkN += r + w + s
	}
}

func TestCgroupPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0::/system.slice/ssh.service\n", "/system.slice/ssh.service"},
		{"12:cpu,cpuacct:/docker/0123abcd\n1:name=systemd:/system.slice/docker-0123abcd.scope\n0::/\n", "/system.slice/docker-0123abcd.scope"},
		{"0::/\n", "/"},
		{"12:cpu,cpuacct:/kubepods/pod1/abc\n1:name=systemd:/kubepods/pod1/abc\n", "/kubepods/pod1/abc"},
		{"4:memory:/m\n3:cpu,cpuacct:/c\n", "/c"},
		{"4:memory:/m\n", "/m"},
		{"", ""},
		{"garbage", ""},
	}
	for _, tt := range tests {
		if got := cgroupPath([]byte(tt.in)); got != tt.want {
			t.Errorf("cgroupPath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
