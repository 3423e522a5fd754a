package goruntime

// between is window.RuntimeBetween. The sources' tests compare what a
// source read over an interval with what the patient says of it, through
// the window layer's subtraction; window imports this package, so the
// external test file window_test.go hands it over (SetBetween).
var between func(a, b *Sample) *Window

// SetBetween sets between.
func SetBetween(f func(a, b *Sample) *Window) { between = f }
