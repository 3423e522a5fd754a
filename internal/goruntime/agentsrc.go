package goruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// agentSource reads a program's gosleuth agent over its Unix socket.
type agentSource struct {
	path   string
	pid    int // the process's PID as gosleuth sees it
	client *http.Client
	info   map[string]string
	dec    metricsDecoder
}

// Info returns the agent's self-description (pid, go, gomaxprocs, numcpu,
// path, module, flightrecorder).
func (s *agentSource) Info() map[string]string { return s.info }

func (s *agentSource) Kind() string { return "agent" }
func (s *agentSource) Addr() string { return s.path }
func (s *agentSource) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// agentURL is the URL of path on the agent; the host is ignored.
func agentURL(path string) string { return "http://agent" + path }

func (s *agentSource) Read(ctx context.Context) (*Sample, error) {
	body, err := httpGet(ctx, s.client, agentURL(wire.PathMetrics), 64<<20)
	if err != nil {
		return nil, fmt.Errorf("read agent metrics: %w", err)
	}
	_, t, goVersion, m, err := s.dec.decode(body)
	if err != nil {
		return nil, err
	}
	smp := &Sample{Time: t, Source: "agent", GoVersion: goVersion}
	sampleFromMetrics(smp, m)
	return smp, nil
}

func (s *agentSource) Goroutines(ctx context.Context) (*GoroutineDump, error) {
	body, err := httpGet(ctx, s.client, agentURL(wire.PathPprof+"goroutine?debug=2"), 256<<20)
	if err != nil {
		return nil, fmt.Errorf("read goroutine dump: %w", err)
	}
	d, err := ParseGoroutines(body)
	if err != nil {
		return nil, err
	}
	dropSelf(d)
	return d, nil
}

// agentServeFunc is the agent's handler that writes the dump: the goroutine
// running it is gosleuth's own request, not the program's.
const agentServeFunc = "github.com/gosleuth/gosleuth/agent.(*Agent).serveProfile"

// dropSelf removes the goroutine serving the dump from it.
func dropSelf(d *GoroutineDump) {
	out := d.Groups[:0]
	for _, g := range d.Groups {
		self := false
		for _, f := range g.Frames {
			if f.Func == agentServeFunc {
				self = true
				break
			}
		}
		if self {
			d.Total -= g.Count
			continue
		}
		out = append(out, g)
	}
	d.Groups = out
}

// FlightRecording fetches the agent's FlightRecorder snapshot (an execution
// trace for go tool trace).
func (s *agentSource) FlightRecording(ctx context.Context) ([]byte, error) {
	b, err := httpGet(ctx, s.client, agentURL(wire.PathTrace), 1<<30)
	if err != nil {
		return nil, fmt.Errorf("flight recorder snapshot: %w", err)
	}
	return b, nil
}

// agentDirs lists where process f's agent may have put its socket, most
// likely first.
func agentDirs(f *Facts, extra []string) []string {
	dirs := append([]string(nil), extra...)
	if f.XDGRuntimeDir != "" {
		dirs = append(dirs, wire.SocketDir(f.UID, f.XDGRuntimeDir))
	}
	dirs = append(dirs, wire.SocketDir(f.UID, "/run/user/"+strconv.Itoa(f.UID)), wire.SocketDir(f.UID, ""))
	// Fallback directories of an agent whose usual one was squatted (the
	// owner check below keeps out those made by someone else).
	if more, err := filepath.Glob(wire.FallbackGlob(f.UID)); err == nil {
		dirs = append(dirs, more...)
	}
	seen := map[string]bool{}
	out := dirs[:0]
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// findAgent looks for process f's agent socket, checks it and connects.
// A socket that is not the process's (dead listener, other owner, other
// peer PID) is skipped with a note.
func findAgent(ctx context.Context, procRoot string, f *Facts, extra []string) (*agentSource, []string, error) {
	pfs := proc.NewFS(procRoot)
	var notes []string
	name := wire.SocketName(f.NSPID)
	for _, dir := range agentDirs(f, extra) {
		paths := []string{filepath.Join(dir, name)}
		// A process in another mount namespace (a container) has its
		// /tmp and /run under /proc/PID/root.
		paths = append(paths, pfs.PID(f.PID, "root", dir, name))
		for _, p := range paths {
			fi, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if fi.Mode().Type() != fs.ModeSocket {
				notes = append(notes, fmt.Sprintf("%s is not a socket: ignored", p))
				break
			}
			if uid, ok := fileOwner(fi); ok && uid != f.UID {
				notes = append(notes, fmt.Sprintf("socket %s is owned by uid %d, not by the process's uid %d: ignored", p, uid, f.UID))
				break
			}
			src, note := dialAgent(ctx, p, f.PID)
			if src != nil {
				return src, notes, nil
			}
			notes = append(notes, note)
			break
		}
	}
	return nil, notes, nil
}

// dialAgent connects to the socket at path and makes sure the process at
// the other end is pid; otherwise it returns a note saying why not.
func dialAgent(ctx context.Context, path string, pid int) (*agentSource, string) {
	d := net.Dialer{Timeout: 2 * time.Second}
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Sprintf("stale agent socket %s (no process listens on it): ignored", path)
		}
		return nil, fmt.Sprintf("agent socket %s: %v: ignored", path, err)
	}
	peer, ok := peerPID(conn)
	conn.Close()
	if ok && peer != pid {
		return nil, fmt.Sprintf("agent socket %s belongs to process %d, not %d: ignored", path, peer, pid)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:      1,
		IdleConnTimeout:   30 * time.Second,
		DisableKeepAlives: false,
	}
	src := &agentSource{path: path, pid: pid, client: &http.Client{Transport: tr, Timeout: 90 * time.Second}}
	body, err := httpGet(ctx, src.client, agentURL(wire.PathInfo), 1<<16)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Sprintf("agent socket %s does not answer as a gosleuth agent (%v): ignored", path, err)
	}
	src.info = parseInfo(body)
	if !ok {
		// No peer credentials on this system: trust the socket's name only
		// if the agent's own PID view agrees.
		if p, _ := strconv.Atoi(src.info["pid"]); p == 0 {
			tr.CloseIdleConnections()
			return nil, fmt.Sprintf("agent socket %s gives no pid: ignored", path)
		}
	}
	return src, ""
}

func parseInfo(b []byte) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			m[k] = v
		}
	}
	return m
}
