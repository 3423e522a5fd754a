// Command ref is the reference program gomem's tests build with the
// toolchain of every Go release the layout tables cover: the runtime's
// structures come from its DWARF, its wait reasons' names from its data,
// and the addresses of the runtime's variables from its symbol table. It
// is kept as small as a Go program gets, so that whatever the tests find in
// it is in every Go program of that release.
package main

import "time"

func main() {
	done := make(chan bool)
	go func() {
		time.Sleep(time.Millisecond)
		done <- true
	}()
	<-done
	println("ref")
}
