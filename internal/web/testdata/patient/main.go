// Command patient is the web dashboard's test patient: a Go program with a
// 1 ms ticker doing nothing (the doctor's idle-wakeups finding) and, with
// "alloc", a light allocation loop so its GC, heap and goroutine charts
// move. With PATIENT_AGENT set it serves the gosleuth agent (the runtime
// source). It prints "ready" once running and runs until killed.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/gosleuth/gosleuth/agent"
)

var sink [][]byte

func main() {
	if os.Getenv("PATIENT_AGENT") != "" {
		defer agent.Start(agent.Options{})()
	}
	go func() {
		t := time.NewTicker(time.Millisecond)
		for range t.C {
		}
	}()
	if len(os.Args) > 1 && os.Args[1] == "alloc" {
		go func() {
			for i := 0; ; i++ {
				sink = append(sink, make([]byte, 64<<10))
				if len(sink) > 64 {
					sink = sink[:0]
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	fmt.Println("ready")
	select {}
}
