// Command noprof is a patient whose binary references nothing of the heap
// profile (not even runtime/pprof's heap writer): the linker turns memory
// profiling off in it.
package main

import (
	"fmt"
	"time"
)

var sink []byte

func main() {
	for i := 0; i < 1000; i++ {
		sink = make([]byte, 1<<12)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}
