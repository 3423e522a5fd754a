package probe

import (
	"slices"
	"strings"
	"testing"
)

func TestStaleEvents(t *testing.T) {
	text := "p:gosleuth_100/f0 /usr/bin/srv:0x0000000000001234\n" +
		"p:gosleuth_100/f3 /usr/bin/srv:0x0000000000005678\n" +
		"p:gosleuth_200/f0 /usr/bin/srv:0x0000000000001234\n" + // alive
		"p:uprobes/p_bash_0x4 /bin/bash:0x0000000000000004\n" + // not ours
		"p:gosleuth_x/f0 /a:0x1\n" + // not a PID
		"p:gosleuth_007/f0 /a:0x1\n" + // not as we write PIDs
		"garbage\n\n"
	got := staleEvents([]byte(text), func(pid int) bool { return pid == 200 })
	if want := []string{"gosleuth_100/f0", "gosleuth_100/f3"}; !slices.Equal(got, want) {
		t.Errorf("stale %v, want %v", got, want)
	}
}

// FuzzStaleEvents: any text of uprobe_events gives only names of
// gosleuth groups, each a line's own event, without a panic.
func FuzzStaleEvents(f *testing.F) {
	f.Add([]byte("p:gosleuth_100/f0 /usr/bin/srv:0x1234\n"))
	f.Add([]byte("r:uprobes/x /bin/x:0x1\n-:gosleuth_1/\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ev := range staleEvents(b, func(int) bool { return false }) {
			if !strings.HasPrefix(ev, "gosleuth_") || !strings.Contains(ev, "/") || strings.ContainsAny(ev, " \n") {
				t.Fatalf("stale event %q from %q", ev, b)
			}
		}
	})
}
