package proc

import (
	"errors"
	"net"
	"os"
	"slices"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestParseListenInodes(t *testing.T) {
	for _, tc := range []struct {
		file string
		port int
		want []uint64
	}{
		{"testdata/net/listen-tcp", 0x46A0, []uint64{762133}},
		{"testdata/net/listen-tcp", 0xD2F4, nil}, // a connection's port, not listening
		{"testdata/net/listen-tcp6", 8080, []uint64{43210}},
		{"testdata/net/tcp", 0xD9E3, []uint64{19208}},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseListenInodes(b, tc.port)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s port %d: %v, %v; want %v", tc.file, tc.port, got, err, tc.want)
		}
	}
	if _, err := parseListenInodes([]byte("header\n0: 0100007F:46A0 00000000:0000 0A\n"), 0x46A0); !errors.Is(err, ErrParse) {
		t.Errorf("a short line: %v, want ErrParse", err)
	}
}

// TestListenerPID finds this process behind a port it listens on, and no
// process behind a port nobody listens on.
func TestListenerPID(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	pid, err := NewFS("").ListenerPID(port)
	if err != nil || pid != os.Getpid() {
		t.Errorf("port %d: pid %d, %v; want this process %d", port, pid, err, os.Getpid())
	}
	ln.Close()
	if pid, err := NewFS("").ListenerPID(port); !errors.Is(err, ErrNoListener) {
		t.Errorf("closed port %d: pid %d, %v; want ErrNoListener", port, pid, err)
	}
	if _, err := NewFS(t.TempDir()).ListenerPID(port); !errors.Is(err, ErrNoListener) {
		t.Errorf("a mount without socket tables: %v, want ErrNoListener", err)
	}
}
