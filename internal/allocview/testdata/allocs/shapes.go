package main

import "flag"

// More shapes, one allocation each, called from serve: a returned pointer,
// a closure's captured variable, an array too large for the stack, a make of
// a size known at run time that the compiler keeps off the heap only when
// small, a string concatenation, a conversion to []byte, a value stored in
// an interface, and a map grown entry by entry.

type point struct{ x, y, z int }

var (
	sinkAny     any
	sinkPoint   *point
	sinkFunc    func() int
	sinkString  string
	sinkBytes   []byte
	sinkMap     map[int]int
	sinkCounter int
	calls       int
)

//go:noinline
func newPoint(i int) *point {
	return &point{i, i + 1, i + 2}
}

//go:noinline
func counter() func() int {
	c := 0
	return func() int { c++; return c }
}

//go:noinline
func big(i int) {
	var a [1 << 18]byte
	a[i%len(a)] = 1
	sinkBytes = a[:]
}

//go:noinline
func scratch(n int) int {
	b := make([]byte, n)
	b[n-1] = 1
	return len(b)
}

//go:noinline
func concat(a, b string) string {
	return a + "/" + b
}

//go:noinline
func toBytes(s string) []byte {
	return []byte(s)
}

//go:noinline
func boxed(i int) {
	sinkAny = point{i, i, i}
}

//go:noinline
func index(n int) map[int]int {
	m := map[int]int{}
	for i := 0; i < n; i++ {
		m[i] = i
	}
	return m
}

var mode = flag.String("mode", "all", "shapes to run: all, small (objects of a few words) or buffers (slices, arrays, maps)")

// shapes runs each small shape once.
func shapes(id int, k string) {
	sinkPoint = newPoint(id)
	sinkFunc = counter()
	sinkString = concat(k, k)
	sinkBytes = toBytes(k)
	boxed(id)
}

// buffers runs the buffer shapes: a run-time-sized make each time, a map
// one time in eight, an array too large for the stack one time in 400.
func buffers(id int) {
	if calls++; calls%400 == 0 {
		big(id)
	}
	sinkCounter += scratch(2048 + id%7)
	if calls%8 == 0 {
		sinkMap = index(64)
	}
}
