// Command allocs is a patient of known shape for the allocation view's
// tests: a request loop that formats a label with fmt.Sprintf per request,
// keeps a pointer-rich cache of the requests, and grows a slice by append
// without pre-sizing it, plus the shapes of shapes.go. -mode small runs
// only the small objects, -mode buffers only the slices, arrays and maps. Built without the noprof tag it serves
// net/http/pprof (so the linker keeps memory profiling on) and prints its
// address; with it, it prints "ready".
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

type entry struct {
	key  string
	next *entry
	hits *int
}

var (
	cache = map[int]*entry{}
	sink  []int
	total int
)

//go:noinline
func label(id int) string {
	return fmt.Sprintf("request-%d", id)
}

//go:noinline
func remember(id int, key string) {
	n := id
	cache[id%20000] = &entry{key: key, hits: &n}
}

//go:noinline
func collect(n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		out = append(out, i)
	}
	return out
}

func serve() {
	small, large := *mode != "buffers", *mode != "small"
	id := 1000
	for {
		for i := 0; i < 40; i++ {
			id++
			if small {
				k := label(id)
				if i%4 == 0 {
					remember(id, k)
				}
				if i%8 == 0 {
					shapes(id, k)
				}
				total += len(k)
			}
			if large && i%8 == 0 {
				buffers(id)
			}
		}
		if large && id%160 == 0 {
			sink = collect(1500)
		}
		time.Sleep(time.Millisecond)
	}
}

func main() {
	flag.Parse()
	addr := start()
	go serve()
	fmt.Println(addr)
	os.Stdout.Sync()
	select {}
}
