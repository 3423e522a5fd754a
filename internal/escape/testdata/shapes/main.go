// Command shapes has one function per reason a value escapes, for the
// escape package's tests: each allocation sits on a line the tests name.
package main

import (
	"fmt"
	"os"
)

type entry struct {
	key  string
	next *entry
	val  *int
}

var (
	cache = map[string]*entry{}
	sink  []byte
)

//go:noinline
func label(i int) string {
	return fmt.Sprintf("req-%d", i) // fmt boxing
}

//go:noinline
func put(k string, v int) {
	x := v                             // moved to heap: stored through a pointer
	cache[k] = &entry{key: k, val: &x} // stored in a map
}

//go:noinline
func grow(n int) []int {
	var s []int
	for i := 0; i < n; i++ {
		s = append(s, i) // growing append
	}
	return s
}

//go:noinline
func newEntry(k string) *entry {
	return &entry{key: k} // returned
}

//go:noinline
func counter() func() int {
	c := 0 // captured by a closure
	return func() int { c++; return c }
}

//go:noinline
func big() {
	var a [1 << 20]byte // too large for stack
	a[3] = 1
	sink = a[:]
}

func main() {
	for i := 0; i < 10; i++ {
		put(label(i), i)
		_ = grow(i)
		_ = newEntry("k")
		_ = counter()
	}
	big()
	fmt.Fprintln(os.Stderr, len(cache))
}
