//go:build race

package hedge

// raceEnabled is true when the tests run with the race detector, which
// makes sync.Pool drop items at random and so changes allocation counts.
const raceEnabled = true
