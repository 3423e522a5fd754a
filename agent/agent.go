package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime/wire"
)

// Options configure the agent. The zero value works: socket in the per-user
// runtime directory, no FlightRecorder, CPU profiles up to 60 s, silent.
type Options struct {
	// Dir is the directory of the socket. Optional: by default
	// $XDG_RUNTIME_DIR/gosleuth, or /tmp/gosleuth-UID when XDG_RUNTIME_DIR
	// is unset; gosleuth looks in both. A directory given here must be
	// private to the user too, and gosleuth finds the socket there only
	// when told (it is not searched).
	Dir string
	// FlightRecorder starts a runtime/trace FlightRecorder so that an
	// execution-trace snapshot of the last seconds can be taken on request.
	// Optional, off by default because the tracer then runs all the time
	// (see the package doc for its cost).
	FlightRecorder bool
	// FlightRecorderMinAge and FlightRecorderMaxBytes configure the
	// FlightRecorder (runtime/trace.FlightRecorderConfig). Optional: zero
	// means the runtime's defaults.
	FlightRecorderMinAge   time.Duration
	FlightRecorderMaxBytes uint64
	// MaxCPUProfile caps the duration of a CPU profile request. Optional:
	// 60 s by default.
	MaxCPUProfile time.Duration
	// Logf receives the agent's rare messages (a failed start from Start, a
	// failed accept). Optional: nothing is logged by default.
	Logf func(format string, args ...any)
}

// ErrRunning is returned by Listen when this process already runs an agent.
var ErrRunning = errors.New("agent already running in this process")

var (
	runningMu sync.Mutex
	running   bool
)

// Agent is a running agent. Close stops it.
type Agent struct {
	opts     Options
	path     string
	ln       net.Listener
	srv      *http.Server
	fr       *trace.FlightRecorder
	done     chan struct{}
	closeErr error
	once     sync.Once

	mu      sync.Mutex // guards samples, enc and buf
	samples []metrics.Sample
	enc     wire.Encoder
	buf     []byte
}

// Start starts the agent and returns the function that stops it, so that
//
//	defer agent.Start(agent.Options{})()
//
// is all a program needs. If the agent cannot start, Start reports why to
// Options.Logf (when set) and returns a function that does nothing: a
// diagnostic aid never stops the program. Use Listen to handle the error.
func Start(opts Options) (stop func()) {
	a, err := Listen(opts)
	if err != nil {
		if opts.Logf != nil {
			opts.Logf("gosleuth agent: %v", err)
		}
		return func() {}
	}
	return func() { a.Close() }
}

// Listen creates the agent's socket and serves it from one goroutine until
// Close. Only one agent may run in a process.
func Listen(opts Options) (*Agent, error) {
	runningMu.Lock()
	defer runningMu.Unlock()
	if running {
		return nil, ErrRunning
	}
	if opts.MaxCPUProfile <= 0 {
		opts.MaxCPUProfile = 60 * time.Second
	}
	dir := opts.Dir
	if dir == "" {
		dir = wire.SocketDir(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR"))
	}
	if err := privateDir(dir); err != nil {
		if opts.Dir != "" {
			return nil, err
		}
		// The usual directory is unusable (read-only, or someone else's:
		// any user can create /tmp/gosleuth-UID first). Fall back to
		// /tmp/gosleuth-UID, then to a directory of our own whose name
		// cannot be guessed; gosleuth searches all of them.
		dir, err = fallbackDir(err)
		if err != nil {
			return nil, err
		}
		if opts.Logf != nil {
			opts.Logf("gosleuth agent: socket directory moved to %s", dir)
		}
	}
	sweepStale(dir)
	path := filepath.Join(dir, wire.SocketName(os.Getpid()))
	// A socket of this name belongs to a dead process that had our PID, or
	// to an agent this process closed: it cannot be live.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	a := &Agent{opts: opts, path: path, ln: ln, done: make(chan struct{})}
	if opts.FlightRecorder {
		fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{
			MinAge: opts.FlightRecorderMinAge, MaxBytes: opts.FlightRecorderMaxBytes})
		if err := fr.Start(); err != nil {
			ln.Close()
			return nil, fmt.Errorf("start flight recorder: %w", err)
		}
		a.fr = fr
	}
	descs := metrics.All()
	a.samples = make([]metrics.Sample, len(descs))
	for i, d := range descs {
		a.samples[i].Name = d.Name
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.PathInfo, a.serveInfo)
	mux.HandleFunc("GET "+wire.PathMetrics, a.serveMetrics)
	mux.HandleFunc("GET "+wire.PathTrace, a.serveTrace)
	mux.HandleFunc("GET "+wire.PathPprof+"{name}", a.serveProfile)
	// net/http logs to the standard logger by default; the agent stays
	// quiet unless Logf is set.
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(logfWriter{opts.Logf}, "gosleuth agent: ", 0)}
	running = true
	go a.serve()
	return a, nil
}

// logfWriter sends net/http's log lines to Options.Logf, or nowhere.
type logfWriter struct{ logf func(string, ...any) }

func (w logfWriter) Write(p []byte) (int, error) {
	if w.logf != nil {
		w.logf("%s", strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// Path returns the socket's path.
func (a *Agent) Path() string { return a.path }

func (a *Agent) serve() {
	defer close(a.done)
	err := a.srv.Serve(a.ln)
	if err != nil && !errors.Is(err, http.ErrServerClosed) && a.opts.Logf != nil {
		a.opts.Logf("gosleuth agent: serve %s: %v", a.path, err)
	}
}

// Close stops serving, removes the socket and stops the FlightRecorder. It
// waits for the serving goroutine but not for requests in progress (a CPU
// profile being taken ends early). It is safe to call more than once.
func (a *Agent) Close() error {
	a.once.Do(func() {
		a.closeErr = a.srv.Close()
		<-a.done
		if a.fr != nil {
			a.fr.Stop()
		}
		runningMu.Lock()
		running = false
		runningMu.Unlock()
	})
	return a.closeErr
}

// sweepStale removes sockets in the private dir that nobody listens on any
// more (agents of processes that died without Close, such as killed ones),
// so the directory does not grow without bound. Only sockets named after a
// PID that no process has, and whose connect is refused, are removed. It
// runs once per Listen and looks at no more than 1000 entries.
func sweepStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	if len(entries) > 1000 {
		entries = entries[:1000]
	}
	for _, e := range entries {
		pidText, ok := strings.CutSuffix(e.Name(), ".sock")
		pid, err := strconv.Atoi(pidText)
		if e.Type() != fs.ModeSocket || !ok || err != nil || processExists(pid) {
			// A live process's socket may be between bind and listen,
			// when connects are refused too: leave it.
			continue
		}
		p := filepath.Join(dir, e.Name())
		c, err := net.DialTimeout("unix", p, 100*time.Millisecond)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			os.Remove(p)
		}
	}
}

// fallbackDir returns a private socket directory when the usual one failed
// with first.
func fallbackDir(first error) (string, error) {
	uid := os.Geteuid()
	if os.Getenv("XDG_RUNTIME_DIR") != "" {
		if dir := wire.SocketDir(uid, ""); privateDir(dir) == nil {
			return dir, nil
		}
	}
	dir, err := os.MkdirTemp("/tmp", wire.FallbackPattern(uid))
	if err != nil {
		return "", fmt.Errorf("%w; create a private socket dir: %w", first, err)
	}
	if err := privateDir(dir); err != nil {
		return "", fmt.Errorf("%w; %w", first, err)
	}
	return dir, nil
}

// privateDir makes sure dir exists, is a directory (not a symlink) owned by
// the effective user and closed to group and others.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create socket dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check socket dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket dir %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("socket dir %s has mode %v: want no group or other access", dir, fi.Mode().Perm())
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("socket dir %s is owned by uid %d, not %d", dir, uid, os.Geteuid())
	}
	return nil
}

func (a *Agent) serveInfo(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d\ngo %s\ngomaxprocs %d\nnumcpu %d\n", os.Getpid(), runtime.Version(),
		runtime.GOMAXPROCS(0), runtime.NumCPU())
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(&b, "path %s\nmodule %s %s\n", bi.Path, bi.Main.Path, bi.Main.Version)
	}
	fr := "off"
	if a.fr != nil && a.fr.Enabled() {
		fr = "on"
	}
	fmt.Fprintf(&b, "flightrecorder %s\nmaxcpuprofile %s\n", fr, a.opts.MaxCPUProfile)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(b.String()))
}

// serveMetrics reads the whole catalog into reused samples and buffer.
func (a *Agent) serveMetrics(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	metrics.Read(a.samples)
	now := time.Now()
	a.buf = wire.AppendHeader(a.buf[:0], os.Getpid(), now.UnixNano(), runtime.Version())
	a.buf = a.enc.AppendMetrics(a.buf, a.samples)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(a.buf)))
	w.Write(a.buf)
}

func (a *Agent) serveTrace(w http.ResponseWriter, r *http.Request) {
	if a.fr == nil || !a.fr.Enabled() {
		http.Error(w, "flight recorder not enabled: start the agent with Options{FlightRecorder: true}", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if _, err := a.fr.WriteTo(w); err != nil {
		// Headers are gone once data was written; a short body tells.
		http.Error(w, "flight recorder snapshot: "+err.Error(), http.StatusInternalServerError)
	}
}

func (a *Agent) serveProfile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name == "profile" {
		a.serveCPU(w, r)
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("unknown profile %q", name), http.StatusNotFound)
		return
	}
	debugLevel, _ := strconv.Atoi(r.FormValue("debug"))
	if debugLevel != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	p.WriteTo(w, debugLevel)
}

func (a *Agent) serveCPU(w http.ResponseWriter, r *http.Request) {
	sec, err := strconv.ParseFloat(r.FormValue("seconds"), 64)
	if err != nil || sec <= 0 {
		sec = 10
	}
	d := time.Duration(sec * float64(time.Second))
	if d > a.opts.MaxCPUProfile {
		http.Error(w, fmt.Sprintf("seconds above the agent's limit of %s", a.opts.MaxCPUProfile), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := pprof.StartCPUProfile(w); err != nil {
		http.Error(w, "start CPU profile: "+err.Error(), http.StatusConflict)
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	pprof.StopCPUProfile()
}
