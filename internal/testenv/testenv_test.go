package testenv

import (
	"os"
	"testing"
)

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		env  string
		f    Feature
		want bool
	}{
		{"", Root, false},
		{"root,tracefs", Root, true},
		{"root, tracefs", Tracefs, true},
		{"root,tracefs", Uprobes, false},
		{"all", Chromium, true},
		{"rootless", Root, false},
	} {
		t.Setenv(EnvRequire, tc.env)
		if got := Required(tc.f); got != tc.want {
			t.Errorf("%s=%q: Required(%s) = %v, want %v", EnvRequire, tc.env, tc.f, got, tc.want)
		}
	}
}

// TestKernelFeatures checks each kernel probe against what the system says
// directly, so a probe that always answers "yes" (or "no") fails.
func TestKernelFeatures(t *testing.T) {
	Require(t, Linux)
	root := os.Geteuid() == 0
	if Has(Root) != root {
		t.Errorf("Has(Root) = %v with euid %d", Has(Root), os.Geteuid())
	}
	_, err := os.Stat("/sys/bus/event_source/devices/uprobe/type")
	if Has(Uprobes) != (err == nil) {
		t.Errorf("Has(Uprobes) = %v, stat of the uprobe PMU: %v", Has(Uprobes), err)
	}
	if root && !Has(Tracefs) {
		t.Errorf("root could not find or mount tracefs: %s", check(Tracefs))
	}
	if check("no-such-feature") == "" {
		t.Error("an unknown feature was reported available")
	}
}

// TestTimingNeverFails: a timing test under the race detector skips even
// when every feature is required, and runs without it.
func TestTimingNeverFails(t *testing.T) {
	t.Setenv(EnvRequire, "all")
	ran := false
	t.Run("timing", func(t *testing.T) {
		Timing(t)
		ran = true
	})
	if ran == RaceEnabled {
		t.Errorf("race detector %v: the timing test ran %v", RaceEnabled, ran)
	}
	if t.Failed() {
		t.Error("a timing test failed instead of skipping")
	}
}
