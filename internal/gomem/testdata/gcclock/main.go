// Command gcclock is the GC clock's patient. It prints "ready", then obeys
// one command a line on stdin:
//
//   - "gc": runs one cycle (runtime.GC) between two readings of
//     CLOCK_MONOTONIC and prints them, with what the runtime says of its
//     cycles: "T0 T1 NUMGC PAUSEEND PAUSE" (nanoseconds; the last cycle's
//     end as Unix time and its pause);
//   - "busy": builds a large pointer-rich heap and runs cycles back to
//     back from then on, so that a reader finds one under way.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

type node struct {
	next *node
	a, b *int
}

var heap []*node

func mono() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func main() {
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "gc":
			t0 := mono()
			runtime.GC()
			t1 := mono()
			var s debug.GCStats
			debug.ReadGCStats(&s)
			fmt.Println(t0, t1, s.NumGC, s.PauseEnd[0].UnixNano(), int64(s.Pause[0]))
		case "busy":
			heap = make([]*node, 1<<21)
			for i := range heap {
				x, y := i, i+1
				heap[i] = &node{a: &x, b: &y}
				if i > 0 {
					heap[i].next = heap[i-1]
				}
			}
			go func() {
				for {
					runtime.GC()
				}
			}()
			fmt.Println("busy")
		}
	}
}
