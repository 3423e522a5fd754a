package goruntime

import (
	"context"
	"errors"
	"os"
	"testing"
)

// BenchmarkConnectNoAgent is what the exporter pays to look for the agent
// of a Go process that has none (the test binary itself), at every look
// of its back-off: it reads the process's status and environment, not its
// executable. With Connect running Discover, which parses the binary for
// its build info and GOMAXPROCS, a look cost twice as much here (~0.36 ms
// and ~92 KB against ~0.18 ms and ~44 KB, Linux 6.18), more the larger the
// binary: the exporter's profile beside other sessions' large test
// binaries put a quarter of its CPU there.
func BenchmarkConnectNoAgent(b *testing.B) {
	dirs := []string{b.TempDir()}
	for b.Loop() {
		// NoMemory: the look for the agent alone (the memory source,
		// which reads this process, is another cost).
		_, _, err := Connect(context.Background(), os.Getpid(), Options{AgentDirs: dirs, NoMemory: true})
		if !errors.Is(err, ErrNoSource) {
			b.Fatalf("connect to a process without an agent: %v, want ErrNoSource", err)
		}
	}
}
