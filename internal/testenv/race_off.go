//go:build !race

package testenv

// RaceEnabled is true when the test binary was built with -race.
const RaceEnabled = false
