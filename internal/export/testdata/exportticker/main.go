// Command exportticker is the exporter's test patient: a Go program whose
// only activity is a 1 ms ticker (about 1,000 wake-ups a second at almost no
// CPU). Its name is its group in the tests. It prints "ready" and runs until
// killed.
package main

import (
	"fmt"
	"time"
)

func main() {
	go func() {
		t := time.NewTicker(time.Millisecond)
		for range t.C {
		}
	}()
	fmt.Println("ready")
	select {}
}
