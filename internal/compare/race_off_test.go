//go:build !race

package compare

// raceEnabled: the tests run under the race detector, which slows the load
// generator enough to stall it for milliseconds.
const raceEnabled = false
