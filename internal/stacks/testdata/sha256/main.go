// Command sha256 hashes a buffer in a loop forever: a pure user-mode CPU
// patient whose top frames are crypto/sha256 functions.
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
)

func main() {
	buf := make([]byte, 64<<10)
	var sum [32]byte
	for i := 0; ; i++ {
		sum = sha256.Sum256(buf)
		buf[i%len(buf)] ^= sum[0]
		if i == -1 {
			fmt.Fprintln(os.Stderr, sum)
		}
	}
}
