package testenv

import "testing"

// TimingSkip is the reason a timing test gives when it skips under the race
// detector; .ci/run's timing step runs those tests without -race.
const TimingSkip = "timing test: the race detector slows this process's code 2-20x, so what the test measures in time " +
	"(a rate held, a latency, a CPU share) would measure the detector; .ci/run runs it without -race"

// Timing marks t as a timing test: one whose assertions are about time
// measured while this test binary's own code runs (a load generator's rate,
// a poll loop's latency, a sampler's share of the CPU). Under the race
// detector such a test is skipped, never failed, whatever
// GOSLEUTH_TEST_REQUIRE says: the race build is not a missing feature but a
// different program, and the test's bounds hold only for the real one. The
// timing tests are listed in .ci/run, which runs them in a step of their own
// without -race (internal/deps_test.go checks that the list and the calls
// agree).
func Timing(t testing.TB) {
	t.Helper()
	if RaceEnabled {
		t.Skip(TimingSkip)
	}
}
