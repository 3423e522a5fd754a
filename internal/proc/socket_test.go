package proc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestParseTCPSocketOwner reads socket tables captured on x86-64 while user
// nobody (65534) held three loopback connections to root's listeners: to
// 127.0.0.1:55779, to [::1]:52031, and from 127.0.0.1 to a dual-stack
// listener on port 47089 (which sees the peer as ::ffff:127.0.0.1). The
// listeners' ends were not yet accepted, so their inode is 0.
func TestParseTCPSocketOwner(t *testing.T) {
	testenv.Require(t, testenv.AMD64) // the fixtures' words are little-endian
	tcp, err := os.ReadFile("testdata/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	tcp6, err := os.ReadFile("testdata/net/tcp6")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		name          string
		table         []byte
		local, remote string
		want          SocketOwner
		found         bool
	}{
		{"v4 client", tcp, "127.0.0.1:46866", "127.0.0.1:55779", SocketOwner{65534, 19213}, true},
		{"v4 server end not accepted", tcp, "127.0.0.1:55779", "127.0.0.1:46866", SocketOwner{0, 0}, true},
		{"v4 client of dual-stack listener", tcp, "127.0.0.1:48510", "127.0.0.1:47089", SocketOwner{65534, 19215}, true},
		{"v4 reversed pair", tcp, "127.0.0.1:55779", "127.0.0.1:46867", SocketOwner{}, false},
		{"v6 client", tcp6, "[::1]:35048", "[::1]:52031", SocketOwner{65534, 19214}, true},
		{"v4-mapped server end", tcp6, "127.0.0.1:47089", "127.0.0.1:48510", SocketOwner{0, 0}, true},
		{"v4-mapped asked as mapped", tcp6, "[::ffff:127.0.0.1]:47089", "[::ffff:127.0.0.1]:48510", SocketOwner{0, 0}, true},
		{"v4 pair not in v6 table", tcp6, "127.0.0.1:46866", "127.0.0.1:55779", SocketOwner{}, false},
		{"header only", []byte("  sl  local_address rem_address   st\n"), "127.0.0.1:1", "127.0.0.1:2", SocketOwner{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := parseTCPSocketOwner(tc.table, ap(tc.local), ap(tc.remote))
			if err != nil || found != tc.found || got != tc.want {
				t.Errorf("got %+v found %v err %v, want %+v found %v", got, found, err, tc.want, tc.found)
			}
		})
	}
}

func TestParseTCPSocketOwnerBad(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, table := range []string{
		"header\n   0: 0100007F:B712\n",
		"header\n   0: 0100007F-B712 0100007F:D9E3 01 0:0 00:0 0 65534 0 19213\n",
		"header\n   0: 0100007G:B712 0100007F:D9E3 01 0:0 00:0 0 65534 0 19213\n",
		"header\n   0: 0100007F:B712 0100007F:D9E3 01 0:0 00:0 0 x 0 19213\n",
		"header\n   0: 0100007F:B712 0100007F:D9E3 01 0:0 00:0 0 65534 0 -1\n",
	} {
		_, _, err := parseTCPSocketOwner([]byte(table), ap("127.0.0.1:46866"), ap("127.0.0.1:55779"))
		if !errors.Is(err, ErrParse) {
			t.Errorf("%q: err %v, want ErrParse", table, err)
		}
	}
}

// TestTCPSocketOwnerLive connects to a listener of the test's own and finds
// the client's socket, owned by the test's user, with an inode; over IPv6
// loopback too where the machine has it.
func TestTCPSocketOwnerLive(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "[::1]:0" {
				continue // no IPv6 loopback here
			}
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		peer := netip.MustParseAddrPort(s.RemoteAddr().String())
		self := netip.MustParseAddrPort(s.LocalAddr().String())
		got, found, err := NewFS("").TCPSocketOwner(peer, self)
		if err != nil || !found || got.UID != os.Getuid() || got.Inode == 0 {
			t.Errorf("%s: client socket %+v found %v err %v, want uid %d and an inode", addr, got, found, err, os.Getuid())
		}
		if _, found, err := NewFS("").TCPSocketOwner(peer, netip.AddrPortFrom(self.Addr(), self.Port()+1)); found || err != nil {
			t.Errorf("%s: a pair nobody holds found %v err %v", addr, found, err)
		}
	}
}

// BenchmarkParseTCPSocketOwner looks a pair up in a table of 10,000
// sockets, the last one matching: a busy server's table, read once per
// connection to gosleuth web.
func BenchmarkParseTCPSocketOwner(b *testing.B) {
	var t []byte
	t = append(t, "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"...)
	for i := range 10000 {
		t = fmt.Appendf(t, "%4d: 0100007F:%04X 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 %d 1 0000000000000000 20 4 30 10 -1\n", i, 10000+i, 50000+i)
	}
	local := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", 10000+9999))
	remote := netip.MustParseAddrPort("127.0.0.1:8080")
	b.ReportAllocs()
	b.SetBytes(int64(len(t)))
	for b.Loop() {
		if _, found, err := parseTCPSocketOwner(t, local, remote); !found || err != nil {
			b.Fatal(found, err)
		}
	}
}
