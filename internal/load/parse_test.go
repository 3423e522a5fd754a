package load

import (
	"bufio"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"5000", 5000, true},
		{"5k", 5000, true},
		{"2.5K", 2500, true},
		{"1m", 1e6, true},
		{"100/s", 100, true},
		{"max", 0, true},
		{"0", 0, false},
		{"-5", 0, false},
		{"abc", 0, false},
		{"", 0, false},
		{"NaN", 0, false},
		{"inf", 0, false},
		{"20m", 0, false}, // above MaxRate
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseRate(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadInput) {
			t.Errorf("ParseRate(%q) error %v is not ErrBadInput", tt.in, err)
		}
	}
}

func TestParseStep(t *testing.T) {
	tests := []struct {
		in   string
		want StepSpec
		ok   bool
	}{
		{"+1000/30s", StepSpec{1000, 30 * time.Second}, true},
		{"1k/1m", StepSpec{1000, time.Minute}, true},
		{"+1000", StepSpec{}, false},
		{"+0/30s", StepSpec{}, false},
		{"+max/30s", StepSpec{}, false},
		{"+100/soon", StepSpec{}, false},
		{"+100/1ms", StepSpec{}, false},
	}
	for _, tt := range tests {
		got, err := ParseStep(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseStep(%q) = %v, %v; want %v ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseSLA(t *testing.T) {
	tests := []struct {
		in    string
		q     float64
		limit time.Duration
		ok    bool
	}{
		{"p99<=15ms", 99, 15 * time.Millisecond, true},
		{"P99.9 < 50ms", 99.9, 50 * time.Millisecond, true},
		{"p50<=2ms", 50, 2 * time.Millisecond, true},
		{"p100<=2ms", 0, 0, false},
		{"p0<=2ms", 0, 0, false},
		{"p99>=15ms", 0, 0, false},
		{"99<=15ms", 0, 0, false},
		{"p99<=fast", 0, 0, false},
		{"p99<=-1ms", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		got, err := ParseSLA(tt.in)
		if (err == nil) != tt.ok || (tt.ok && (got.Quantile != tt.q || got.Limit != tt.limit)) {
			t.Errorf("ParseSLA(%q) = %+v, %v; want q=%v limit=%v ok=%v", tt.in, got, err, tt.q, tt.limit, tt.ok)
		}
	}
}

func TestParseURLAndHeader(t *testing.T) {
	for _, s := range []string{"http://localhost:8080/x", "https://example.com"} {
		if _, err := ParseURL(s); err != nil {
			t.Errorf("ParseURL(%q): %v", s, err)
		}
	}
	for _, s := range []string{"ftp://x", "localhost:8080", "http://", "http://h:99999/", "http://h:0/", "::"} {
		if _, err := ParseURL(s); err == nil {
			t.Errorf("ParseURL(%q) accepted", s)
		}
	}
	if h, err := ParseHeader("X-Test:  a b "); err != nil || h != (Header{"X-Test", "a b"}) {
		t.Errorf("ParseHeader = %+v, %v", h, err)
	}
	for _, s := range []string{"novalue", ": v", "Bad Name: v"} {
		if _, err := ParseHeader(s); err == nil {
			t.Errorf("ParseHeader(%q) accepted", s)
		}
	}
}

func TestBuildRequest(t *testing.T) {
	u, _ := url.Parse("http://h.example:81/p?q=1")
	got := string(buildRequest(&Config{URL: u, Method: "POST", Body: []byte("abc"),
		Headers: []Header{{"X-A", "1"}, {"Content-Length", "99"}}}))
	want := "POST /p?q=1 HTTP/1.1\r\nHost: h.example:81\r\nX-A: 1\r\nUser-Agent: gosleuth-load\r\nContent-Length: 3\r\n\r\nabc"
	if got != want {
		t.Errorf("request\n%q\nwant\n%q", got, want)
	}
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		head   bool
		status int
		close  bool
		err    error // errors.Is target; nil for success
		rest   string
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", false, 200, false, nil, "NEXT"},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT", false, 200, false, nil, "NEXT"},
		{"connection close", "HTTP/1.1 503 Busy\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n", false, 503, true, nil, ""},
		{"http/1.0 no length", "HTTP/1.0 200 OK\r\n\r\nbody to EOF", false, 200, true, nil, ""},
		{"http/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nxNEXT", false, 200, false, nil, "NEXT"},
		{"100 continue", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\nNEXT", false, 201, false, nil, "NEXT"},
		{"204 ignores length", "HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\nNEXT", false, 204, false, nil, "NEXT"},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nNEXT", true, 200, false, nil, "NEXT"},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nokNEXT", false, 200, false, nil, "NEXT"},
		{"not http", "SSH-2.0-OpenSSH\r\n", false, 0, false, errMalformed, ""},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", false, 0, false, errMalformed, ""},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, 200, false, errMalformed, ""},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, 200, false, errMalformed, ""},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", false, 200, false, io.ErrUnexpectedEOF, ""},
		{"cut headers", "HTTP/1.1 200 OK\r\nContent-Len", false, 200, false, io.ErrUnexpectedEOF, ""},
		{"empty", "", false, 0, false, io.EOF, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in))
			r, err := readResponse(br, tt.head)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || r.status != tt.status || r.close != tt.close {
				t.Fatalf("got %+v, %v; want status %d close %v", r, err, tt.status, tt.close)
			}
			rest, _ := io.ReadAll(br)
			if string(rest) != tt.rest {
				t.Errorf("left %q, want %q", rest, tt.rest)
			}
		})
	}
}

func TestIsLocalHost(t *testing.T) {
	for h, want := range map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, "0.0.0.0": true,
		"192.0.2.1": false, "example.com": false} {
		if got := IsLocalHost(h); got != want {
			t.Errorf("IsLocalHost(%q) = %v", h, got)
		}
	}
}
