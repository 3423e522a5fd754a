// Command lockpair holds a lock-bound program and its look-alike control,
// written apart from the other patients: "ledger" is twelve goroutines
// appending checksummed entries to one ledger under a plain sync.Mutex
// (lock-contention); "fanout" is a coordinator that hands batches to
// workers and waits for them with a sync.WaitGroup, with no mutex at all
// (must not warn lock-contention). It prints "ready", then runs until
// killed.
package main

import (
	"fmt"
	"hash/crc32"
	"log"
	"os"
	"strconv"
	"sync"
	"time"
)

type ledger struct {
	mu      sync.Mutex
	entries []uint32
	buf     []byte
}

// append checksums the entry while holding the lock, as a careless
// writer does.
func (l *ledger) append(worker, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = l.buf[:0]
	for i := 0; i < 24; i++ {
		l.buf = strconv.AppendInt(l.buf, int64(worker*seq+i), 16)
	}
	l.entries = append(l.entries, crc32.ChecksumIEEE(l.buf))
	if len(l.entries) > 1<<14 {
		l.entries = l.entries[:0]
	}
}

func ledgerWorkers() {
	l := &ledger{}
	for w := range 12 {
		go func() {
			for seq := 0; ; seq++ {
				l.append(w, seq)
			}
		}()
	}
}

func fanout() {
	work := make([]chan int, 16)
	var wg sync.WaitGroup
	sums := make([]int, len(work))
	for i := range work {
		work[i] = make(chan int)
		go func() {
			for n := range work[i] {
				s := 0
				for j := 0; j < n; j++ {
					s += j ^ i
				}
				sums[i] = s
				wg.Done()
			}
		}()
	}
	go func() {
		for {
			wg.Add(len(work))
			for _, c := range work {
				c <- 3000
			}
			wg.Wait()
			time.Sleep(2 * time.Millisecond)
		}
	}()
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: lockpair ledger|fanout")
	}
	switch os.Args[1] {
	case "ledger":
		ledgerWorkers()
	case "fanout":
		fanout()
	default:
		log.Fatalf("unknown behaviour %q", os.Args[1])
	}
	fmt.Println("ready")
	select {}
}
