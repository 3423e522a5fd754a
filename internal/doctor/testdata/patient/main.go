// Command patient is a Go program with one known problem at a time, chosen
// by its first argument, for the doctor's integration tests. It prints
// "ready" on stdout once the behaviour runs and then runs until killed.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

var sink []byte

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: patient MODE")
		os.Exit(2)
	}
	mode := os.Args[1]
	switch mode {
	case "select": // control: an idle program
	case "ticker": // idle-wakeups: a 1 ms ticker doing nothing
		go func() {
			t := time.NewTicker(time.Millisecond)
			for range t.C {
			}
		}()
	case "sleeploop": // idle-wakeups written differently: a clock cached by a sleep loop in a library-like type
		c := &clock{}
		go c.run()
	case "tickerselect": // idle-wakeups: a ticker in a select with other cases
		go func() {
			t := time.NewTicker(time.Millisecond)
			quit := make(chan struct{})
			work := make(chan int)
			for {
				select {
				case <-t.C:
				case n := <-work:
					_ = n
				case <-quit:
					return
				}
			}
		}()
	case "reopen": // file-reopen-churn: re-reads /proc files with os.ReadFile
		go func() {
			for {
				for _, f := range []string{"/proc/self/stat", "/proc/self/status", "/proc/loadavg"} {
					b, _ := os.ReadFile(f)
					sink = b
				}
				time.Sleep(time.Millisecond)
			}
		}()
	case "exec": // exec-hot-path: runs a program 50 times a second
		go func() {
			for {
				_ = exec.Command("true").Run()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	case "fdleak": // fd-leak: opens a file 20 times a second and never closes it
		go func() {
			var keep []*os.File
			for {
				f, err := os.Open("/dev/null")
				if err == nil {
					keep = append(keep, f)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	case "fdlimit": // fd-limit: holds 90% of a lowered soft limit
		lim := syscall.Rlimit{Cur: 200, Max: 200}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var keep []*os.File
		for len(keep) < 180 {
			f, err := os.Open("/dev/null")
			if err != nil {
				break
			}
			keep = append(keep, f)
		}
		defer runtime.KeepAlive(keep)
	case "memgrow": // memory-growth: keeps 8 MB more every second
		go func() {
			var keep [][]byte
			for {
				b := make([]byte, 1<<20)
				for i := range b {
					b[i] = byte(i)
				}
				keep = append(keep, b)
				time.Sleep(125 * time.Millisecond)
			}
		}()
	case "threads": // thread-explosion: 300 goroutines blocked in raw reads of pipes
		for range 300 {
			r, _, err := os.Pipe()
			if err != nil {
				break
			}
			fd := int(r.Fd()) // Fd puts the pipe in blocking mode
			go func() {
				var b [1]byte
				syscall.Read(fd, b[:])
			}()
		}
	case "server", "busy": // controls: an HTTP server (idle, or loaded by the test)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("addr", ln.Addr())
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello\n")
		}))
	case "lock": // lock-contention: 8 goroutines on one mutex guarding slow work
		var mu sync.Mutex
		for range 8 {
			go func() {
				for {
					mu.Lock()
					spin(20 * time.Microsecond)
					mu.Unlock()
					time.Sleep(10 * time.Microsecond)
				}
			}()
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
	fmt.Println("ready", os.Getpid(), strconv.Itoa(runtime.GOMAXPROCS(0)))
	select {}
}

// clock caches the time every millisecond, like a library's "fast clock".
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) run() {
	for {
		c.mu.Lock()
		c.now = time.Now()
		c.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

func spin(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}
