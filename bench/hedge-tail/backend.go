package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// serverStats are the counters of a scenario server.
type serverStats struct {
	Received, Executed, Dropped, Conns int64
	BusyNs                             int64 // worker time used (capacity only)
	Workers                            int   // 0 when concurrency is unlimited
}

func (s *server) stats() serverStats {
	return serverStats{
		Received: s.received.Load(), Executed: s.executed.Load(), Dropped: s.dropped.Load(),
		Conns: s.conns.Load(), BusyNs: s.busy.Load(), Workers: cap(s.sem),
	}
}

// backend is a running scenario server.
type backend interface {
	url() string
	stats() (serverStats, error)
	close() error
}

// startBackend starts the server of sc in this process, or in a child
// process of its own ("process", the default): a server whose work is a
// Go timer (the 2 ms of the capacity scenario) runs late when the client
// in the same runtime arms timers of its own, which would charge the
// client's timers to the server's capacity.
func startBackend(sc scenario, where string) (backend, error) {
	switch where {
	case "inprocess":
		return startInProcess(sc)
	case "process":
		return startChild(sc)
	}
	return nil, fmt.Errorf("unknown -server %q", where)
}

// listen starts the scenario server on a loopback port.
func listen(sc scenario) (*server, *http.Server, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen: %w", err)
	}
	srv := &server{}
	hs := &http.Server{Handler: sc.handler(srv), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			srv.conns.Add(1)
		}
	}}
	go hs.Serve(ln)
	return srv, hs, ln, nil
}

type inProcess struct {
	srv  *server
	hs   *http.Server
	addr string
}

func startInProcess(sc scenario) (*inProcess, error) {
	srv, hs, ln, err := listen(sc)
	if err != nil {
		return nil, err
	}
	return &inProcess{srv: srv, hs: hs, addr: ln.Addr().String()}, nil
}

func (b *inProcess) url() string                 { return "http://" + b.addr + "/" }
func (b *inProcess) stats() (serverStats, error) { return b.srv.stats(), nil }
func (b *inProcess) close() error                { return b.hs.Close() }

// child is a scenario server in a child process. It prints the addresses
// of its server and of its stats endpoint, and exits when its stdin is
// closed, so it cannot outlive the benchmark.
type child struct {
	cmd             *exec.Cmd
	stdin           io.Closer
	addr, statsAddr string
}

func startChild(sc scenario) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe, "-serve-child", sc.name)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("child stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server process: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		c.close()
		return nil, fmt.Errorf("read server addresses: %w", err)
	}
	addr, stats, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		c.close()
		return nil, fmt.Errorf("server process said %q, want two addresses", line)
	}
	c.addr, c.statsAddr = addr, stats
	return c, nil
}

func (c *child) url() string { return "http://" + c.addr + "/" }

func (c *child) stats() (serverStats, error) {
	var s serverStats
	resp, err := http.Get("http://" + c.statsAddr + "/")
	if err != nil {
		return s, fmt.Errorf("server stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("decode server stats: %w", err)
	}
	return s, nil
}

func (c *child) close() error {
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		return errors.New("server process did not exit; killed")
	}
}

// serveChild is the child process: it serves scenario name until its
// stdin is closed.
func serveChild(name string) error {
	var sc *scenario
	for i := range scenarios {
		if scenarios[i].name == name {
			sc = &scenarios[i]
		}
	}
	if sc == nil {
		return fmt.Errorf("unknown scenario %q", name)
	}
	srv, hs, ln, err := listen(*sc)
	if err != nil {
		return err
	}
	defer hs.Close()
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go http.Serve(ctl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(srv.stats())
	}))
	fmt.Printf("%s %s\n", ln.Addr(), ctl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}
