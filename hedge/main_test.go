package hedge

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind: a hedge
// that is never cancelled, a timer callback, a body that is never closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
