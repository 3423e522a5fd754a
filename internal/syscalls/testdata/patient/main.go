// Command patient makes an exact number of getppid syscalls for the
// syscalls tests and benchmark.
//
// It prints "ready" once its worker threads exist, waits for a line on
// stdin, has -threads threads call getppid -calls times each (raw syscalls,
// so the Go runtime adds nothing around them), prints "done" and waits for
// stdin to close. With -late the worker threads are started only after the
// go line; with -child it also runs itself as a child process making
// -calls getppid calls in one thread and waits for it; with -solo there is
// no handshake (start, work, exit); with -loop it calls getppid until
// killed (with -progress, writing its count and CPU time to a file).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

func main() {
	threads := flag.Int("threads", 4, "worker threads")
	calls := flag.Int("calls", 50000, "getppid calls per worker thread")
	late := flag.Bool("late", false, "start the worker threads after the go line")
	child := flag.Bool("child", false, "also run a child process making -calls calls")
	loop := flag.Bool("loop", false, "call getppid until killed")
	solo := flag.Bool("solo", false, "no handshake: make the calls and exit")
	fail := flag.Int("fail", 0, "failing close(-1) calls (EBADF) per worker thread, after the getppid calls")
	progress := flag.String("progress", "", "with -loop, write \"calls cpu-ns\" to this `file` every 50 ms")
	flag.Parse()
	if *loop {
		runtime.LockOSThread()
		for n := uint64(1); ; n++ {
			syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
			if *progress != "" && n%4096 == 0 {
				writeProgress(*progress, n)
			}
		}
	}
	in := bufio.NewReader(os.Stdin)
	start := make(chan struct{})
	var ready, done sync.WaitGroup
	spawn := func() {
		for range *threads {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				runtime.LockOSThread()
				ready.Done()
				<-start
				work(*calls)
				failClose(*fail)
			}()
		}
		ready.Wait()
	}
	if !*late {
		spawn()
	}
	if !*solo {
		fmt.Println("ready")
		if _, err := in.ReadString('\n'); err != nil {
			os.Exit(1)
		}
	}
	if *late {
		spawn()
	}
	close(start)
	done.Wait()
	if *child {
		cmd := exec.Command(os.Args[0], "-solo", "-threads", "1", "-calls", fmt.Sprint(*calls))
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
	}
	if !*solo {
		fmt.Println("done")
		in.ReadString('\n')
	}
}

func work(n int) {
	for range n {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
}

var lastWrite time.Time

// writeProgress replaces file with the calls made so far and the thread's
// CPU time, at most every 50 ms.
func writeProgress(file string, calls uint64) {
	if time.Since(lastWrite) < 50*time.Millisecond {
		return
	}
	lastWrite = time.Now()
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	cpu := ru.Utime.Nano() + ru.Stime.Nano()
	tmp := file + ".tmp"
	os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", calls, cpu), 0o644)
	os.Rename(tmp, file)
}

// failClose makes n close(-1) calls, each failing with EBADF.
func failClose(n int) {
	for range n {
		syscall.RawSyscall(syscall.SYS_CLOSE, ^uintptr(0), 0, 0)
	}
}
