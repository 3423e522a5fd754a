package testbin

import (
	"os"
	"testing"

	"github.com/google/pprof/profile"
)

// ReadPprof parses the pprof file a command under test wrote at path,
// failing the test when it cannot be read or parsed.
func ReadPprof(t testing.TB, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return p
}
