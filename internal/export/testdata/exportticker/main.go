// Command exportticker is the exporter's test patient: a Go program whose
// only activity is a 1 ms ticker (about 1,000 wake-ups a second at almost no
// CPU) allocating one small object per tick. Its name is its group in the
// tests. With PATIENT_AGENT set it serves the gosleuth agent (a runtime
// source). It prints "ready" and runs until killed.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/gosleuth/gosleuth/agent"
)

var sink []byte

func main() {
	if os.Getenv("PATIENT_AGENT") != "" {
		defer agent.Start(agent.Options{})()
	}
	go func() {
		t := time.NewTicker(time.Millisecond)
		for range t.C {
			sink = make([]byte, 64)
		}
	}()
	fmt.Println("ready")
	select {}
}
