// Command maxprocs is the patient of the tests that read GOMAXPROCS from a
// process's memory: it calls runtime.GOMAXPROCS with its argument (what no
// environment or CPU count shows), prints "ready PID" and runs until its
// standard input closes.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "usage: maxprocs N")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(n)
	fmt.Println("ready", os.Getpid())
	io.Copy(io.Discard, os.Stdin)
}
