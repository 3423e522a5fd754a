// Command scribbler is a hostile patient for the runtime reader: it
// overwrites its own runtime's books (runtime.allgs, runtime.allglen,
// runtime.mbuckets) with garbage, loops and huge counts while it is read,
// so the tests can check that gosleuth survives any bytes a process can put
// at those addresses. It runs with the GC off and starts no goroutine after
// main begins, so the runtime itself does not walk what it scribbles.
// Build with -ldflags=-checklinkname=0.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"time"
	"unsafe"
)

//go:linkname allgs runtime.allgs
var allgs []unsafe.Pointer

//go:linkname allglen runtime.allglen
var allglen uintptr

//go:linkname mbuckets runtime.mbuckets
var mbuckets unsafe.Pointer

// keep holds the fake structures so they stay where the pointers say.
var keep [][]uint64

func garbage(n int, r *rand.Rand, self bool) []uint64 {
	b := make([]uint64, n)
	for i := range b {
		switch r.IntN(4) {
		case 0:
			b[i] = r.Uint64()
		case 1:
			b[i] = uint64(r.IntN(1 << 20))
		case 2:
			if self {
				b[i] = uint64(uintptr(unsafe.Pointer(&b[r.IntN(n)])))
			}
		default:
			b[i] = ^uint64(0)
		}
	}
	return b
}

func main() {
	debug.SetGCPercent(-1)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	fmt.Println("ready")
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		keep = keep[:0]
		// A fake allgs: pointers into fake records of garbage, some
		// pointing at each other.
		recs := make([]unsafe.Pointer, 1+r.IntN(2000))
		for i := range recs {
			g := garbage(64, r, true)
			keep = append(keep, g)
			recs[i] = unsafe.Pointer(&g[0])
		}
		switch r.IntN(3) {
		case 0:
			allgs = recs
		case 1:
			allgs = unsafe.Slice((*unsafe.Pointer)(unsafe.Pointer(uintptr(r.Uint64()))), r.IntN(1<<30))
		}
		allglen = uintptr(r.Uint64() >> uint(r.IntN(64)))
		// A fake bucket list: a bucket whose next pointers loop, with
		// huge or garbage frame counts.
		b := garbage(64, r, true)
		b[1] = uint64(uintptr(unsafe.Pointer(&b[0]))) // allnext: itself
		b[2] = 1                                      // typ: memory profile
		b[5] = uint64(r.IntN(4096))                   // nstk
		keep = append(keep, b)
		if r.IntN(2) == 0 {
			mbuckets = unsafe.Pointer(&b[0])
		} else {
			mbuckets = unsafe.Pointer(uintptr(r.Uint64()))
		}
		time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
	}
	os.Exit(0)
}
