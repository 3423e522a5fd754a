// Command patient calls main.hit in batches on one locked thread and
// prints the thread CPU time per call of each batch, in ns.
package main

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

//go:noinline
func hit(x int) int { return leaf(x) + 1 }

//go:noinline
func leaf(x int) int { return x * 2 }

var sink int

func cpu() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

func main() {
	runtime.LockOSThread()
	const n = 20000
	fmt.Println("ready")
	for {
		t0 := cpu()
		for i := range n {
			sink += hit(i)
		}
		fmt.Printf("%.1f\n", float64(cpu()-t0)/n)
		time.Sleep(20 * time.Millisecond)
	}
}
