// Command gcheavy keeps a large pointer-rich heap and allocates fast, so
// the GC runs all the time, with mark assists: a patient for the GC classes.
package main

import "runtime/debug"

type node struct {
	next *node
	val  [4]int
}

func main() {
	debug.SetGCPercent(10)
	live := make([]*node, 1<<18)
	for i := range live {
		live[i] = &node{}
	}
	for i := 0; ; i++ {
		n := &node{next: live[(i*7)%len(live)]}
		live[i%len(live)] = n
		_ = make([]byte, 256)
	}
}
