// Command runtime-books measures what reading a Go program's runtime books
// from its memory (package internal/gomem) costs the program and gosleuth,
// side by side with the runtime's own goroutine profile, in one run:
//
//   - the target's latency under a fixed request rate, in windows that
//     alternate: nothing read; a census and statistics read from memory
//     every -every; the program's own /debug/pprof/goroutine?debug=1 every
//     -every (which stops its world for the walk). Medians over -rounds of
//     each window's p99 and max, and their ratios to the quiet windows;
//   - gosleuth's own cost per snapshot at each -goroutines count: CPU time
//     of the reading thread and bytes allocated, medians of -reps reads, for
//     a census with stacks unwound (the default), a census counting only,
//     and the statistics; the program's own goroutine profile's reply time
//     beside it.
//
// Run it from the repository root as root:
//
//	go run ./bench/runtime-books [-goroutines 100,200000] [-rate 500] [-window 10s] [-rounds 5]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/proc"
)

func main() {
	if n := os.Getenv("RUNTIME_BOOKS_TARGET"); n != "" {
		target(n)
		return
	}
	if m := os.Getenv("RUNTIME_BOOKS_READER"); m != "" {
		reader(m)
		return
	}
	counts := flag.String("goroutines", "100,200000", "parked goroutines in the target, comma list")
	rate := flag.Int("rate", 500, "requests per second sent to the target during the latency windows")
	window := flag.Duration("window", 10*time.Second, "length of each latency window")
	rounds := flag.Int("rounds", 5, "rounds of the three latency windows (quiet, memory, goroutine profile)")
	every := flag.Duration("every", time.Second, "how often a window's reader reads")
	reps := flag.Int("reps", 10, "reads per cost figure")
	flag.Parse()
	self, err := os.Executable()
	check(err)
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(s)
		check(err)
		fmt.Printf("== target with %d parked goroutines\n", n)
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "RUNTIME_BOOKS_TARGET="+s)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		check(err)
		check(cmd.Start())
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			fmt.Fprintln(os.Stderr, "runtime-books: the target did not start")
			os.Exit(1)
		}
		addr := sc.Text()
		p, err := gomem.Open(proc.FS{}, cmd.Process.Pid)
		check(err)
		cost(p, addr, *reps)
		latency(p, addr, *rate, *window, *rounds, *every)
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// cost prints gosleuth's CPU and allocation per snapshot, medians of reps.
func cost(p *gomem.Process, addr string, reps int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	measure := func(name string, f func()) {
		var cpus, allocs, walls []float64
		for range reps {
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			c0, w0 := threadCPU(), time.Now()
			f()
			c1, w1 := threadCPU(), time.Now()
			runtime.ReadMemStats(&ms1)
			cpus = append(cpus, (c1-c0).Seconds()*1000)
			walls = append(walls, w1.Sub(w0).Seconds()*1000)
			allocs = append(allocs, float64(ms1.TotalAlloc-ms0.TotalAlloc)/(1<<20))
		}
		fmt.Printf("  %-44s CPU %7.2f ms  wall %7.2f ms  allocated %6.2f MB  (medians of %d)\n", name, median(cpus), median(walls), median(allocs), reps)
	}
	var total int
	measure("census, stacks unwound (gosleuth's default)", func() {
		c, err := p.Census(gomem.CensusOptions{})
		check(err)
		total = c.Total
	})
	measure("census, counts and groups only", func() {
		_, err := p.Census(gomem.CensusOptions{Unwind: -1})
		check(err)
	})
	measure("GC, memory, scheduler and timer statistics", func() {
		_, err := p.Stats()
		check(err)
	})
	measure("heap profile", func() {
		_, err := p.HeapProfile()
		check(err)
	})
	var walls []float64
	for range reps {
		w0 := time.Now()
		get("http://" + addr + "/debug/pprof/goroutine?debug=1")
		walls = append(walls, time.Since(w0).Seconds()*1000)
	}
	fmt.Printf("  %-44s reply %7.2f ms (the program's own work, its world stopped for the walk)\n", "anchor: /debug/pprof/goroutine?debug=1", median(walls))
	fmt.Printf("  (%d goroutines counted)\n", total)
}

// latency runs the windows and prints medians of their p99 and max.
func latency(p *gomem.Process, addr string, rate int, window time.Duration, rounds int, every time.Duration) {
	modes := []string{"quiet", "memory census every " + every.String(), "goroutine profile every " + every.String(),
		"memory census every " + every.String() + ", SCHED_IDLE"}
	p99s := make([][]float64, len(modes))
	maxs := make([][]float64, len(modes))
	for r := 0; r < rounds; r++ {
		for m := range modes {
			ctx, cancel := context.WithTimeout(context.Background(), window)
			// The reader runs in a process of its own, as gosleuth would:
			// its CPU and GC stay out of the load generator's.
			var rd *exec.Cmd
			if m > 0 {
				self, err := os.Executable()
				check(err)
				mode := m
				rd = exec.Command(self)
				if m == 3 {
					// The same census from a process that runs only when
					// a CPU would otherwise idle.
					mode = 1
					rd = exec.Command("chrt", "--idle", "0", self)
				}
				rd.Env = append(os.Environ(), fmt.Sprintf("RUNTIME_BOOKS_READER=%d %d %s %s", mode, p.PID, addr, every))
				rd.Stderr = os.Stderr
				check(rd.Start())
			}
			lat := load(ctx, addr, rate)
			cancel()
			if rd != nil {
				rd.Process.Kill()
				rd.Wait()
			}
			sort.Float64s(lat)
			if len(lat) == 0 {
				continue
			}
			p99s[m] = append(p99s[m], lat[len(lat)*99/100])
			maxs[m] = append(maxs[m], lat[len(lat)-1])
		}
	}
	q := median(p99s[0])
	for m, name := range modes {
		fmt.Printf("  %-40s p99 %8.2f ms (x%.2f of quiet)  max %8.2f ms  (medians of %d windows of %s at %d req/s)\n",
			name, median(p99s[m]), median(p99s[m])/q, median(maxs[m]), len(p99s[m]), window, rate)
	}
}

// reader is the reading process of a latency window: "MODE PID ADDR
// EVERY", mode 1 a census and statistics from memory, 2 the program's own
// goroutine profile, every EVERY until killed.
func reader(arg string) {
	var (
		mode, pid   int
		addr, every string
	)
	_, err := fmt.Sscan(arg, &mode, &pid, &addr, &every)
	check(err)
	d, err := time.ParseDuration(every)
	check(err)
	var p *gomem.Process
	if mode == 1 {
		p, err = gomem.Open(proc.FS{}, pid)
		check(err)
	}
	for t := time.NewTicker(d); ; <-t.C {
		switch mode {
		case 1:
			p.Census(gomem.CensusOptions{})
			p.Stats()
		case 2:
			get("http://" + addr + "/debug/pprof/goroutine?debug=1")
		}
	}
}

// load sends rate requests per second, open loop, until ctx ends, and
// returns each request's latency in milliseconds.
func load(ctx context.Context, addr string, rate int) []float64 {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	res := make(chan float64, 1<<16)
	interval := time.Second / time.Duration(rate)
	next := time.Now()
	n := 0
	for ctx.Err() == nil {
		time.Sleep(time.Until(next))
		sent := next
		next = next.Add(interval)
		n++
		go func() {
			resp, err := client.Get("http://" + addr + "/work")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			// Latency from the intended send time: a stalled sender
			// counts against the target (no coordinated omission).
			res <- time.Since(sent).Seconds() * 1000
		}()
	}
	out := make([]float64, 0, n)
	for range n {
		out = append(out, <-res)
	}
	client.CloseIdleConnections()
	return out
}

func get(url string) {
	resp, err := http.Get(url)
	check(err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// threadCPU is the calling thread's CPU time, to the nanosecond (getrusage
// counts in clock ticks).
func threadCPU() time.Duration {
	var ts unix.Timespec
	check(unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts))
	return time.Duration(ts.Nano())
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "runtime-books:", err)
		os.Exit(1)
	}
}

// target parks n goroutines, each holding a 4 KiB buffer in a blocking
// read (a gateway's idle connections), and serves /work (a small
// computation) and net/http/pprof on a loopback port it prints.
func target(ns string) {
	n, err := strconv.Atoi(ns)
	check(err)
	for i := 0; i < n; i++ {
		a, b := net.Pipe()
		_ = b
		go func() {
			buf := make([]byte, 4096)
			a.Read(buf)
		}()
	}
	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		s := 0
		for i := range 20000 {
			s += i * i
		}
		fmt.Fprintln(w, s)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	fmt.Println(ln.Addr())
	http.Serve(ln, nil)
}
