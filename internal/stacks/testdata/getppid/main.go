// Command getppid calls getppid(2) in a loop forever: a patient that spends
// most of its CPU time entering and leaving the kernel.
package main

import "syscall"

func main() {
	var n int
	for {
		n += syscall.Getppid()
	}
}
