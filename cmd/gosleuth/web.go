package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
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
	allowUsers  userList
}

func init() {
	register(&command{
		Name:  "web",
		Usage: "web [--listen 127.0.0.1:9468] [--pid PID ...] [--proc ROOT] [--allow-uid USER ...] [--allow-remote]",
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
loads nothing from outside (its assets are in the binary). Other users'
processes are shown only when gosleuth runs as root.

Who may use it: the dashboard acts with gosleuth's privileges, so it serves
only the user who started it, root and the users named by --allow-uid (under
sudo, the user in SUDO_UID too): the owner of each connecting socket is
looked up in the kernel's socket table, and another local user gets 403 even
with the token. Every request needs the token in the URL printed at start
(the first page load keeps it in a cookie; scripts send it as
"Authorization: Bearer TOKEN"). Exact syscall counting and profiles are
started by POST, and only the dashboard's own page may send them: requests
from other sites or other ports get 403. It listens on loopback unless
--allow-remote is given; then connections from other hosts are served to
whoever has the token.`,
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			f := &webFlags{}
			fs.StringVar(&f.listen, "listen", "127.0.0.1:9468", "`address` to listen on (loopback unless --allow-remote)")
			fs.Var(&f.pids, "pid", "show only these `PID`s (comma list or repeated)")
			fs.StringVar(&f.procRoot, "proc", "/proc", "procfs mount `path`")
			fs.DurationVar(&f.history, "history", time.Hour, "history kept per watched process, at 1 s")
			fs.DurationVar(&f.linger, "linger", 30*time.Second, "how long a process's sampler runs on after its last viewer left")
			fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow --listen on a non-loopback address (anyone who can reach it and has the token sees command lines and stacks)")
			fs.Var(&f.allowUsers, "allow-uid", "also serve these local `users` (names or uids, comma list or repeated); they see and profile what gosleuth can")
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
		return usagef("--listen %s is not a loopback address: anyone with the token could use the dashboard from another host, add --allow-remote to mean it", f.listen)
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
	allow := []int(f.allowUsers)
	if uid, err := strconv.Atoi(os.Getenv("SUDO_UID")); err == nil && os.Getuid() == 0 {
		allow = append(allow, uid) // the user who ran sudo gosleuth web opens the page
	}
	srv, err := web.New(web.Config{PIDs: f.pids, ProcRoot: f.procRoot, History: f.history,
		Linger: max(f.linger, time.Millisecond), AnyHost: !loopback, AllowUIDs: allow})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext, ReadHeaderTimeout: 10 * time.Second}
	if !loopback {
		fmt.Fprintf(stderr, "gosleuth web: WARNING: listening on %s, beyond loopback: anyone who reaches it with the token sees this host's processes, command lines and stacks (plain HTTP: the token crosses the network in clear)\n", ln.Addr())
	}
	users := make([]string, 0, 4)
	for _, u := range srv.Users() {
		users = append(users, "uid "+strconv.Itoa(u))
	}
	shown := ln.Addr().String()
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		// Listening on every address: the URL to open here is loopback's.
		shown = net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	fmt.Fprintf(stderr, "gosleuth web: serving http://%s/?token=%s to %s\n", shown, srv.Token(), strings.Join(users, ", "))
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

// userList is a --allow-uid value: users by name or number, as uids.
type userList []int

func (l *userList) String() string {
	s := make([]string, len(*l))
	for i, u := range *l {
		s[i] = strconv.Itoa(u)
	}
	return strings.Join(s, ",")
}

func (l *userList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		if uid, err := strconv.Atoi(name); err == nil && uid >= 0 {
			*l = append(*l, uid)
			continue
		}
		u, err := user.Lookup(name)
		if err != nil {
			return fmt.Errorf("user %q: %w", name, err)
		}
		uid, err := strconv.Atoi(u.Uid)
		if err != nil {
			return fmt.Errorf("user %q: uid %q is not a number", name, u.Uid)
		}
		*l = append(*l, uid)
	}
	return nil
}
