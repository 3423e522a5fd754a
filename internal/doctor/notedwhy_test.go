package doctor

import (
	"strings"
	"testing"
)

// TestNotedWhy: as root, a rule left undecided because a close look got
// nothing points to the notes only when a note speaks of that process; a
// run whose looks reported nothing (a window too short for them) never
// says "(see the notes)" over an empty notes section.
func TestNotedWhy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		notes []string
		want  string
		not   string
	}{
		{"no notes", nil, "no error was reported", "see the notes"},
		{"another process's note", []string{"pid 11: stacks: perf_event_open: permission denied"}, "no error was reported", "see the notes"},
		{"its note", []string{"pid 10: stacks: perf_event_open: permission denied"}, "see the notes", "no error was reported"},
	} {
		w := win(10, func(w *Window) { w.PID, w.UserSec = 10, 2 })
		rep := Diagnose([]*Window{w}, &Host{CPUs: 2, Root: true}, tc.notes, true)
		found := false
		for _, u := range rep.Unchecked {
			if u.Rule != "cpu-hotspot" {
				continue
			}
			found = true
			if !strings.Contains(u.Why, tc.want) || strings.Contains(u.Why, tc.not) {
				t.Errorf("%s: cpu-hotspot undecided because %q, want %q and not %q", tc.name, u.Why, tc.want, tc.not)
			}
		}
		if !found {
			t.Errorf("%s: cpu-hotspot decided without stack samples", tc.name)
		}
	}
}
