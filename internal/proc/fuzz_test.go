package proc

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsers feeds one input to every /proc parser: files under /proc are
// written by the kernel, but a comm or cmdline inside them is any user's, so
// no input may panic. Seeds are the captured fixtures.
func FuzzParsers(f *testing.F) {
	files, _ := filepath.Glob("testdata/proc/*/*")
	nets, _ := filepath.Glob("testdata/net/*")
	files = append(files, nets...)
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("1 (a) b) c)) R 0"))
	f.Add([]byte("42 (" + string(make([]byte, 300)) + ") S 1 2 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s statFields
		if err := parseStat(b, &s); err == nil && len(s.Comm) > len(b) {
			t.Fatalf("comm of %d bytes from %d", len(s.Comm), len(b))
		}
		parseSchedstat(b)
		parseStatusCtxsw(b)
		parseIO(b)
		parseLimitsNoFile(b)
		cmdlineString(b)
		cgroupPath(b)
		parseNSpid(b)
		fdinfoPid(b)
		ap := netip.MustParseAddrPort("127.0.0.1:46866")
		parseTCPSocketOwner(b, ap, ap)
		parseListenInodes(b, 8080)
	})
}
