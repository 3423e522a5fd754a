// Package testenv decides, in one place, whether a test may skip for lack of
// a privilege, a kernel feature or an outside program, so that CI can tell
// "tested" from "skipped".
//
// A test names what it needs with Require (or reports a failure it met with
// Missing). Where the feature is absent the test is skipped with the reason,
// unless the feature is listed in GOSLEUTH_TEST_REQUIRE (a comma list of
// Feature names, or "all"): then the test fails, because the machine is
// supposed to have it. .ci/run sets the variable, so a CI machine that lost
// root, tracefs or uprobes fails instead of going green with the kernel
// untested (the way cilium/ebpf's SkipIfNotSupported fails on a kernel that
// should have the feature).
//
// It is for tests only.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Feature names something a test may need.
type Feature string

// The features tests ask for. Each has a check below; the names are what
// GOSLEUTH_TEST_REQUIRE lists.
const (
	Linux      Feature = "linux"      // running on Linux
	AMD64      Feature = "amd64"      // an x86-64 machine (code decoded by hand is x86-64's)
	Root       Feature = "root"       // effective uid 0
	Perf       Feature = "perf"       // perf_event_open of a software event on another process
	Tracefs    Feature = "tracefs"    // tracefs found or mounted (the product mounts it as root)
	Uprobes    Feature = "uprobes"    // the uprobe PMU (/sys/bus/event_source/devices/uprobe)
	BPF        Feature = "bpf"        // the bpf(2) syscall creates a map
	Chromium   Feature = "chromium"   // a chromium binary on PATH
	Prometheus Feature = "prometheus" // prometheus and promtool on PATH
	Tmux       Feature = "tmux"       // tmux on PATH (terminal UI tests)
	Nobody     Feature = "nobody"     // root, so a test can run a command as user nobody
	GCC        Feature = "gcc"        // gcc on PATH (cgo patients, external linking)
	Node       Feature = "node"       // node on PATH (runs the flame graph page's script)
	Strace     Feature = "strace"     // strace on PATH (tests of what gosleuth opens)
	// NodeExporter is Debian's prometheus-node-exporter: a real stripped
	// binary built by an older Go (1.19), for the layout readers.
	NodeExporter Feature = "node-exporter"
	// GoToolchains is the go command fetching the toolchain of an older Go
	// release through the module proxy (GOTOOLCHAIN=go1.20.14 go version),
	// for the tests that build reference programs with every release.
	GoToolchains Feature = "gotoolchains"
	// Podman is Debian's podman with runc, as root: the image's tests run
	// gosleuth in real containers.
	Podman Feature = "podman"
	// Git is a git checkout of gosleuth with git on PATH: the go command
	// stamps a build with its commit (the version command's test).
	Git Feature = "git"
)

// EnvRequire is the variable that lists the features whose absence fails a
// test instead of skipping it.
const EnvRequire = "GOSLEUTH_TEST_REQUIRE"

// Require skips t (or fails it, see the package doc) unless every feature is
// available.
func Require(t testing.TB, features ...Feature) {
	t.Helper()
	for _, f := range features {
		if why := check(f); why != "" {
			Missing(t, f, why)
			return
		}
	}
}

// Missing skips t because feature f is not available for the reason given,
// or fails it when f is required. Use it where the test itself discovers the
// absence (an attach that returned ErrNotSupported, say).
func Missing(t testing.TB, f Feature, reason string) {
	t.Helper()
	msg := fmt.Sprintf("needs %s: %s", f, reason)
	if Required(f) {
		t.Fatalf("%s (%s=%s: this machine must have it)", msg, EnvRequire, os.Getenv(EnvRequire))
	}
	t.Skip(msg)
}

// Required reports whether GOSLEUTH_TEST_REQUIRE lists f (or "all").
func Required(f Feature) bool {
	for _, s := range strings.Split(os.Getenv(EnvRequire), ",") {
		s = strings.TrimSpace(s)
		if s == "all" || s == string(f) {
			return true
		}
	}
	return false
}

// Has reports whether f is available, for tests that adapt rather than skip.
func Has(f Feature) bool { return check(f) == "" }

var (
	mu     sync.Mutex
	checks = map[Feature]string{}
)

// check returns "" when f is available, else why not. Results are cached per
// test binary.
func check(f Feature) string {
	mu.Lock()
	defer mu.Unlock()
	if why, ok := checks[f]; ok {
		return why
	}
	why := probe(f)
	checks[f] = why
	return why
}

func probe(f Feature) string {
	if f != Linux && runtime.GOOS != "linux" {
		return "not Linux"
	}
	switch f {
	case Linux:
		if runtime.GOOS != "linux" {
			return "this is " + runtime.GOOS
		}
		return ""
	case AMD64:
		if runtime.GOARCH != "amd64" {
			return "this is " + runtime.GOARCH
		}
		return ""
	case Root, Nobody:
		if os.Geteuid() != 0 {
			return "not running as root"
		}
		return ""
	case Chromium:
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if _, err := exec.LookPath(name); err == nil {
				return ""
			}
		}
		return "no chromium on PATH (apt-get install chromium)"
	case Prometheus:
		for _, name := range []string{"prometheus", "promtool"} {
			if _, err := exec.LookPath(name); err != nil {
				return "no " + name + " on PATH (apt-get install prometheus)"
			}
		}
		return ""
	case GoToolchains:
		if _, err := exec.LookPath("go"); err != nil {
			return "no go command on PATH"
		}
		return ""
	case Tmux, GCC, Node, Strace:
		if _, err := exec.LookPath(string(f)); err != nil {
			return "no " + string(f) + " on PATH"
		}
		return ""
	case Podman:
		if os.Geteuid() != 0 {
			return "not running as root"
		}
		if _, err := exec.LookPath("podman"); err != nil {
			return "no podman on PATH (apt-get install podman runc)"
		}
		if _, err := os.Stat("/usr/sbin/runc"); err != nil {
			return "no /usr/sbin/runc (apt-get install runc)"
		}
		return ""
	case Git:
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err != nil || len(strings.TrimSpace(string(out))) != 40 {
			return "not in a git checkout with git on PATH"
		}
		return ""
	case NodeExporter:
		if _, err := os.Stat("/usr/bin/prometheus-node-exporter"); err != nil {
			return "no /usr/bin/prometheus-node-exporter (apt-get install prometheus-node-exporter)"
		}
		return ""
	}
	return probeKernel(f)
}
