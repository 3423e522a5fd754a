package export

import (
	"testing"
	"time"
)

// TestTickTimer: the timer fires once after its delay, not before; a reset
// replaces the earlier setting; a stopped timer releases its file.
func TestTickTimer(t *testing.T) {
	tt, err := newTickTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tt.stop()
	for _, tc := range []struct {
		name  string
		first time.Duration // set first, then replaced by d (0: not set)
		d     time.Duration
	}{
		{"fires after its delay", 0, 40 * time.Millisecond},
		{"a reset replaces a later setting", time.Hour, 30 * time.Millisecond},
		{"a reset replaces an earlier setting", 5 * time.Millisecond, 60 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if tc.first > 0 {
				if err := tt.reset(tc.first); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.reset(tc.d); err != nil {
				t.Fatal(err)
			}
			select {
			case <-tt.C():
				if got := time.Since(start); got < tc.d {
					t.Errorf("fired after %v, want at least %v", got, tc.d)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("did not fire within 5 s of a %v delay", tc.d)
			}
			select {
			case <-tt.C():
				t.Error("a one-shot timer fired twice")
			case <-time.After(3 * tc.d):
			}
		})
	}
}
