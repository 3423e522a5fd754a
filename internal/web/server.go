package web

import (
	"bytes"
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/profileview"
)

//go:embed assets
var assetFS embed.FS

// Config says what the dashboard serves.
type Config struct {
	// PIDs, when set, restricts the dashboard to these processes.
	PIDs []int
	// ProcRoot is the procfs mount point (empty: the default one).
	ProcRoot string
	// Interval is the sampling period (default 1 s).
	Interval time.Duration
	// History is how much each watched process keeps (default 1 h).
	History time.Duration
	// Linger is how long a sampler runs on after its last viewer left
	// (default 30 s), so a reload does not break the lines.
	Linger time.Duration
	// EvalEvery runs the doctor's rules every this many samples (default 5).
	EvalEvery int
	// Slice is the length of the history slices in which a finding's start
	// is looked for (default 10 s).
	Slice time.Duration
	// ProfileLimit bounds a profile's length (default 60 s).
	ProfileLimit time.Duration
	// AnyHost accepts requests whatever their Host header says. By default
	// only loopback names are accepted (a page on another site that points
	// a name of its own at 127.0.0.1 cannot read the dashboard); set it
	// when listening beyond loopback.
	AnyHost bool
	// AllUsers shows other users' processes; the default is root's view
	// when running as root and one's own processes otherwise.
	AllUsers bool
	// Token is the secret every request must carry (in the cookie the
	// first page load sets from ?token=, or an Authorization: Bearer
	// header). Empty: New makes one; Server.Token returns it.
	Token string
	// AllowUIDs are users, besides the dashboard's own and root, whose
	// local connections are served. They see what the dashboard's user
	// sees (every process when it runs as root) and may profile it.
	AllowUIDs []int
}

// Server is the dashboard: its handler and the samplers behind it.
type Server struct {
	cfg      Config
	capacity int
	cpus     int
	uid      int
	token    string
	uids     []int // users served: the dashboard's own, root, Config.AllowUIDs
	fs       proc.FS
	assets   map[string]*asset
	wg       sync.WaitGroup
	samplers atomic.Int32 // per-process samplers running, for tests

	mu      sync.Mutex
	watches map[int]*watch
	list    *procList
	closed  bool

	profiles profileStore
}

// asset is one embedded file, with its gzipped form.
type asset struct {
	body, gz []byte
	ctype    string
}

// New prepares a dashboard. Nothing is sampled until a page asks.
func New(cfg Config) (*Server, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.History <= 0 {
		cfg.History = time.Hour
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 30 * time.Second
	}
	if cfg.EvalEvery <= 0 {
		cfg.EvalEvery = 5
	}
	if cfg.Slice <= 0 {
		cfg.Slice = 10 * time.Second
	}
	if cfg.ProfileLimit <= 0 {
		cfg.ProfileLimit = time.Minute
	}
	if os.Geteuid() == 0 {
		cfg.AllUsers = true
	}
	s := &Server{
		cfg:      cfg,
		capacity: int(cfg.History / cfg.Interval),
		cpus:     onlineCPUs(cfg.ProcRoot),
		uid:      os.Getuid(),
		token:    cfg.Token,
		fs:       proc.NewFS(cfg.ProcRoot),
		watches:  map[int]*watch{},
	}
	for _, u := range append([]int{os.Getuid(), 0}, cfg.AllowUIDs...) {
		if !slices.Contains(s.uids, u) {
			s.uids = append(s.uids, u)
		}
	}
	s.list = &procList{s: s}
	var err error
	if s.token == "" {
		if s.token, err = newToken(); err != nil {
			return nil, err
		}
	}
	if s.assets, err = loadAssets(); err != nil {
		return nil, err
	}
	return s, nil
}

// loadAssets reads the embedded files and compresses each once.
func loadAssets() (map[string]*asset, error) {
	out := map[string]*asset{}
	err := fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".LICENSE") || path.Base(p) == "README" {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "assets/")] = &asset{body: b, gz: gzipBytes(b), ctype: ct}
		return nil
	})
	// The flame graph renderer is profileview's, shared with gosleuth
	// profile's page.
	fj := []byte(profileview.FlameScript)
	out["flame.js"] = &asset{body: fj, gz: gzipBytes(fj), ctype: "text/javascript; charset=utf-8"}
	return out, err
}

// AssetSizes returns the embedded assets' total size, plain and gzipped.
func (s *Server) AssetSizes() (plain, gzipped int) {
	for _, a := range s.assets {
		plain += len(a.body)
		gzipped += len(a.gz)
	}
	return plain, gzipped
}

// Close stops every sampler and waits for them.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	ws := make([]*watch, 0, len(s.watches))
	for _, w := range s.watches {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		w.stopLocked()
		w.notifyLocked()
		w.mu.Unlock()
	}
	s.list.mu.Lock()
	s.list.stopLocked()
	s.list.notifyLocked()
	s.list.mu.Unlock()
	s.wg.Wait()
}

// Handler serves the page, its assets and its API to the users and the
// page the checks in guard.go admit. Reading is GET (and HEAD); the two
// actions, exact syscall counting and a profile, are POST.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", s.serveIndex)
	mux.HandleFunc("/assets/", s.serveAsset)
	mux.HandleFunc("/api/procs", s.serveProcs)
	mux.HandleFunc("/api/procs/events", s.serveProcEvents)
	mux.HandleFunc("/api/history", s.serveHistory)
	mux.HandleFunc("/api/events", s.serveEvents)
	mux.HandleFunc("/api/syscalls", s.serveSyscallMode)
	mux.HandleFunc("/api/profile", s.serveProfile)
	mux.HandleFunc("/api/profile.pb.gz", s.servePprof)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h := rw.Header()
		// Nothing the page loads or connects to may leave its origin.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if !s.cfg.AnyHost && !loopbackHost(r.Host) {
			http.Error(rw, "this dashboard answers only to loopback names (localhost, 127.0.0.1, [::1])", http.StatusForbidden)
			return
		}
		if why := s.peerRefused(r); why != "" {
			http.Error(rw, why, http.StatusForbidden)
			return
		}
		if allow := methodsFor(r.URL.Path); !slices.Contains(allow, r.Method) {
			h.Set("Allow", strings.Join(allow, ", "))
			http.Error(rw, r.Method+" "+r.URL.Path+": want "+strings.Join(allow, " or "), http.StatusMethodNotAllowed)
			return
		}
		pageLoad := r.URL.Path == "/" && r.Method != http.MethodPost
		if pageLoad && s.takeToken(rw, r) {
			return
		}
		if !s.tokenOK(r) {
			http.Error(rw, "this dashboard needs its token: open the URL with ?token= that gosleuth web printed when it started", http.StatusUnauthorized)
			return
		}
		if !pageLoad {
			if why := crossOrigin(r); why != "" {
				http.Error(rw, why, http.StatusForbidden)
				return
			}
		}
		mux.ServeHTTP(rw, r)
	})
}

// methodsFor lists the methods a path answers: POST for the actions,
// GET and HEAD for the rest. /api/profile also answers GET ?id= with a
// kept profile.
func methodsFor(path string) []string {
	switch path {
	case "/api/syscalls":
		return []string{http.MethodPost}
	case "/api/profile":
		return []string{http.MethodGet, http.MethodHead, http.MethodPost}
	}
	return []string{http.MethodGet, http.MethodHead}
}

// loopbackHost reports whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) serveIndex(rw http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(rw, r)
		return
	}
	s.writeAsset(rw, r, "index.html")
}

func (s *Server) serveAsset(rw http.ResponseWriter, r *http.Request) {
	s.writeAsset(rw, r, strings.TrimPrefix(r.URL.Path, "/assets/"))
}

func (s *Server) writeAsset(rw http.ResponseWriter, r *http.Request, name string) {
	a := s.assets[name]
	if a == nil {
		http.NotFound(rw, r)
		return
	}
	h := rw.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("Vary", "Accept-Encoding")
	writeBody(rw, r, a.body, a.gz)
}

// writeBody writes body, gzipped when the client takes it and gz is set.
func writeBody(rw http.ResponseWriter, r *http.Request, body, gz []byte) {
	if gz != nil && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		rw.Header().Set("Content-Encoding", "gzip")
		body = gz
	}
	rw.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method != http.MethodHead {
		rw.Write(body)
	}
}

// errStatus maps an error of the vocabulary to an HTTP status.
func errStatus(err error) int {
	switch {
	case errors.Is(err, proc.ErrProcessGone), errors.Is(err, proc.ErrZombie):
		return http.StatusNotFound
	case errors.Is(err, proc.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, proc.ErrKernelThread), errors.Is(err, proc.ErrNotSupported):
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}

func httpError(rw http.ResponseWriter, err error) {
	http.Error(rw, err.Error(), errStatus(err))
}

// pidParam reads ?pid=N.
func pidParam(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.URL.Query().Get("pid"))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("want ?pid=N with N a process ID, got %q", r.URL.Query().Get("pid"))
	}
	return pid, nil
}

// allowed says whether the dashboard may show pid at all.
func (s *Server) allowedPID(pid int) bool {
	if len(s.cfg.PIDs) == 0 {
		return true
	}
	for _, p := range s.cfg.PIDs {
		if p == pid {
			return true
		}
	}
	return false
}

// watchFor returns pid's watch, creating it when the process may be
// watched: a live user process, one's own unless running as root, one of
// Config.PIDs when they were given. A watch whose process exited is kept
// (its page shows the history) until the PID is reused.
func (s *Server) watchFor(pid int) (*watch, error) {
	if !s.allowedPID(pid) {
		return nil, fmt.Errorf("process %d is not among the --pid processes this dashboard was started for: %w", pid, proc.ErrPermission)
	}
	s.mu.Lock()
	w := s.watches[pid]
	s.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		exited := w.exited
		w.mu.Unlock()
		if !exited {
			return w, nil
		}
		if id, err := proc.ReadIdentity(s.cfg.ProcRoot, pid); err != nil || id.StartTime == w.start {
			return w, nil // still gone: show what was seen
		}
	}
	if err := proc.CheckTarget(s.cfg.ProcRoot, pid); err != nil {
		return nil, err
	}
	id, err := proc.ReadIdentity(s.cfg.ProcRoot, pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	f, err := goruntime.Discover(s.cfg.ProcRoot, pid)
	if err != nil {
		return nil, err
	}
	if !s.cfg.AllUsers && f.UID != s.uid {
		return nil, fmt.Errorf("process %d belongs to another user; gosleuth shows other users' processes only when it runs as root: %w", pid, proc.ErrPermission)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("dashboard closing")
	}
	if old := s.watches[pid]; old != nil && old.start == id.StartTime {
		return old, nil
	}
	s.evictLocked()
	w = newWatch(s, pid, id, f)
	s.watches[pid] = w
	return w, nil
}

// maxKept bounds the histories kept; the least recently viewed idle one
// goes first. 64 hours of history at 1 s is about 64 x 850 KB.
const maxKept = 64

func (s *Server) evictLocked() {
	if len(s.watches) < maxKept {
		return
	}
	var victim *watch
	for _, w := range s.watches {
		w.mu.Lock()
		idle, used := w.viewers == 0 && !w.running, w.used
		w.mu.Unlock()
		if idle && (victim == nil || used.Before(victim.used)) {
			victim = w
		}
	}
	if victim != nil {
		delete(s.watches, victim.pid)
	}
}

// gzipBytes compresses b.
func gzipBytes(b []byte) []byte {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return z.Bytes()
}
