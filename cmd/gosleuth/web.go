package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/gosleuth/gosleuth/internal/web"
)

// webFlags is what "gosleuth web" was asked to do.
type webFlags struct {
	listen      string
	pids        pidList
	procRoot    string
	history     time.Duration
	linger      time.Duration
	allowRemote bool
}

func init() {
	register(&command{
		Name:  "web",
		Usage: "web [--listen 127.0.0.1:9468] [--pid PID ...] [--proc ROOT] [--allow-remote]",
		Short: "live charts of any process in the browser, with the doctor's findings and flame graphs",
		Long: `
Serves one page: the process list (sortable, filterable) and, for a chosen
process (/?pid=N), live charts at 1 s of its CPU (user, system), wake-ups and
involuntary switches, threads against GOMAXPROCS, RSS, descriptors against
the limit and syscalls (read/write-class from /proc; exact counts by kind on
demand, as root, at a cost to the target of about 1 us per call), and for Go
programs with a runtime source (the gosleuth agent) the GC's CPU share, heap
against its goal, goroutines and scheduling latency. The doctor's findings
are listed beside the charts and marked where they began. "profile 10 s"
samples user and kernel stacks into a flame graph and a pprof file.

Each watched process keeps --history of points in memory, shared by every
viewer; its sampler runs while a page shows it (and --linger after). The page
loads nothing from outside (its assets are in the binary), and the server
answers GET only. It listens on loopback unless --allow-remote is given: the
page shows command lines and stacks, and has no authentication. Other
users' processes are shown only when gosleuth runs as root.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &webFlags{}
			fs.StringVar(&f.listen, "listen", "127.0.0.1:9468", "`address` to listen on (loopback unless --allow-remote)")
			fs.Var(&f.pids, "pid", "show only these `PID`s (comma list or repeated)")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.DurationVar(&f.history, "history", time.Hour, "history kept per watched process, at 1 s")
			fs.DurationVar(&f.linger, "linger", 30*time.Second, "how long a process's sampler runs on after its last viewer left")
			fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow --listen on a non-loopback address (no authentication: anyone who can reach it sees command lines and stacks)")
			return func(ctx context.Context, args []string, _, stderr io.Writer) error {
				if len(args) > 0 {
					return usagef("web takes no arguments (got %q); use --pid", args[0])
				}
				return runWeb(ctx, f, stderr, nil)
			}
		},
	})
}

// runWeb serves the dashboard until ctx ends. ready, when set, receives the
// address listened on.
func runWeb(ctx context.Context, f *webFlags, stderr io.Writer, ready chan<- string) error {
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usagef("--listen %q: want HOST:PORT (127.0.0.1:9468)", f.listen)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if !loopback && !f.allowRemote {
		return usagef("--listen %s is not a loopback address: the dashboard has no authentication, add --allow-remote to mean it", f.listen)
	}
	if f.history < time.Minute {
		return usagef("--history must be at least 1m, got %s", f.history)
	}
	if f.linger < 0 {
		return usagef("--linger must not be negative")
	}
	if runtime.GOOS != "linux" {
		return errors.New("web reads /proc and runs on Linux only")
	}
	if err := checkTargets(f.procRoot, f.pids...); err != nil {
		return err
	}
	oneP()
	srv, err := web.New(web.Config{PIDs: f.pids, ProcRoot: f.procRoot, History: f.history,
		Linger: max(f.linger, time.Millisecond), AnyHost: !loopback})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if !loopback {
		fmt.Fprintf(stderr, "gosleuth web: WARNING: listening on %s, beyond loopback, without authentication: anyone who reaches it sees this host's processes, command lines and stacks\n", ln.Addr())
	}
	fmt.Fprintf(stderr, "gosleuth web: serving http://%s/\n", ln.Addr())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Close() // ends the event streams, so Shutdown need not wait for them
	hs.Shutdown(sctx)
	return nil
}
