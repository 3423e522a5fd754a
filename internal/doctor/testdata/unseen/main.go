// Command unseen holds patients written apart from testdata/patient, to
// judge the doctor's rules on programs they were not tuned on. The first
// argument picks the behaviour; the program prints "ready" and, for the
// servers, "addr HOST:PORT", then runs until killed.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/gosleuth/gosleuth/agent"
	"github.com/gosleuth/gosleuth/internal/doctor/testdata/unseen/fastclock"
)

var behaviours = map[string]func(){
	// Lock-bound: eight workers hash under one global mutex.
	"lock8": lockedHashing,
	// Lock-bound written as a shared logger: every goroutine formats a
	// line into one buffer under its lock.
	"logger": sharedLogger,
	// A 1 ms ticker inside an imported package.
	"pkgticker": func() { _ = fastclock.Now() },
	// A timer re-armed from its own callback every millisecond.
	"afterfunc": func() { fastclock.Rearm(time.Millisecond) },
	// 200 goroutines a second, each waiting for a reply nobody sends.
	"leak": leakRequests,
	// 100 goroutines a second, each waiting on a connection to a server
	// that accepts and never answers (no timeout), with the agent.
	"leakhttp": func() { agent.Start(agent.Options{}); leakHTTP() },
	// A configuration file re-read about 10,000 times a second.
	"rereadconfig": rereadConfig,
	// HTTP handlers whose cost sits under one avoidable library call.
	"regexphandler":   func() { serve(regexpHandler) },
	"templatehandler": func() { serve(templateHandler) },
	// A handler that reads its settings file on every request.
	"settingshandler": settingsServer,
	// A handler that deep-copies a catalogue through JSON per request.
	"jsoncopy": func() { serve(jsonCopyHandler) },
	// Controls.
	// A metrics endpoint that reads many /proc files per request, as
	// exporters do: the reading is the request's work.
	"procmetrics": func() { serve(procMetricsHandler) },
	"compute":     compute,
	"idleserver":  func() { serve(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }) },
	// A server whose handlers share a mutex-guarded cache: healthy.
	"cacheserver": func() { serve(cacheHandler) },
}

func main() {
	if len(os.Args) != 2 || behaviours[os.Args[1]] == nil {
		log.Fatalf("usage: unseen BEHAVIOUR (one of %d)", len(behaviours))
	}
	behaviours[os.Args[1]]()
	fmt.Println("ready")
	select {}
}

var (
	tableMu sync.Mutex
	table   = map[[32]byte]int{}
)

func lockedHashing() {
	for w := range 8 {
		go func() {
			buf := bytes.Repeat([]byte{byte(w)}, 512)
			for i := 0; ; i++ {
				tableMu.Lock()
				sum := sha256.Sum256(buf)
				table[sum]++
				buf[i%len(buf)]++
				tableMu.Unlock()
			}
		}()
	}
}

type logger struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.buf, format, args...)
	if l.buf.Len() > 1<<16 {
		l.buf.Reset()
	}
}

func sharedLogger() {
	l := &logger{}
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				l.printf("worker %d step %d at %s\n", w, i, strings.Repeat("x", i%32))
			}
		}()
	}
}

type request struct{ reply chan string }

func leakRequests() {
	pending := make(chan request) // nobody ever serves it
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		for range tick.C {
			for range 10 {
				go func() {
					r := request{reply: make(chan string)}
					pending <- r
					<-r.reply
				}()
			}
		}
	}()
}

func leakHTTP() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	client := &http.Client{} // no timeout
	go func() {
		for range time.Tick(10 * time.Millisecond) {
			go fetchStatus(client, "http://"+ln.Addr().String()+"/status")
		}
	}()
}

func fetchStatus(c *http.Client, url string) {
	resp, err := c.Get(url)
	if err == nil {
		resp.Body.Close()
	}
}

var cache = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

func cacheHandler(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("k")
	if key == "" {
		key = r.RemoteAddr
	}
	cache.Lock()
	v, ok := cache.m[key]
	if !ok {
		sum := sha256.Sum256([]byte(key))
		v = sum[:]
		cache.m[key] = v
	}
	cache.Unlock()
	w.Write(v[:8])
}

type config struct {
	mu     sync.Mutex
	values map[string]string
}

func rereadConfig() {
	f, err := os.CreateTemp("", "unseen-config-*.ini")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(f, "listen = 127.0.0.1:8080\nworkers = 4\nlog = info")
	f.Close()
	cfg := &config{}
	go func() {
		for {
			for range 10 {
				cfg.load(f.Name())
			}
			time.Sleep(time.Millisecond)
		}
	}()
}

// load re-reads the whole file each time a value is wanted.
func (c *config) load(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " = "); ok {
			m[k] = v
		}
	}
	c.mu.Lock()
	c.values = m
	c.mu.Unlock()
}

func settingsServer() {
	f, err := os.CreateTemp("", "unseen-settings-*.json")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(f, `{"greeting": "hello", "limit": 10}`)
	f.Close()
	serve(func(w http.ResponseWriter, r *http.Request) {
		var s struct {
			Greeting string `json:"greeting"`
		}
		if b, err := os.ReadFile(f.Name()); err == nil {
			json.Unmarshal(b, &s)
		}
		fmt.Fprintln(w, s.Greeting)
	})
}

type item struct {
	SKU, Name string
	Price     float64
	Tags      []string
	Attrs     map[string]string
}

var catalogue = func() []item {
	var out []item
	for i := range 300 {
		out = append(out, item{SKU: fmt.Sprintf("SKU-%05d", i), Name: fmt.Sprintf("item %d", i), Price: float64(i) / 4,
			Tags: []string{"a", "b"}, Attrs: map[string]string{"colour": "red", "size": "m"}})
	}
	return out
}()

// snapshotCatalogue hands out a copy callers may change.
func snapshotCatalogue() []item {
	b, _ := json.Marshal(catalogue)
	var out []item
	json.Unmarshal(b, &out)
	return out
}

func jsonCopyHandler(w http.ResponseWriter, r *http.Request) {
	items := snapshotCatalogue()
	fmt.Fprintln(w, len(items), items[0].SKU)
}

// procMetricsHandler reads this process's /proc files for every scrape.
func procMetricsHandler(w http.ResponseWriter, r *http.Request) {
	n := 0
	for _, name := range []string{"stat", "status", "io", "limits", "statm", "cmdline", "environ", "mounts", "cgroup", "sched", "schedstat", "smaps_rollup", "wchan", "oom_score", "loginuid", "sessionid"} {
		if b, err := os.ReadFile("/proc/self/" + name); err == nil {
			n += len(b)
		}
	}
	for _, name := range []string{"stat", "meminfo", "loadavg", "uptime", "vmstat", "diskstats", "net/dev", "net/snmp", "filesystems", "cpuinfo"} {
		if b, err := os.ReadFile("/proc/" + name); err == nil {
			n += len(b)
		}
	}
	fmt.Fprintln(w, n)
}

func serve(h http.HandlerFunc) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("addr", ln.Addr())
	go http.Serve(ln, h)
}

// routes is a router's table written as one pattern, as a hurried
// handler does.
var routes = func() string {
	var names []string
	for i := range 200 {
		names = append(names, fmt.Sprintf("resource%d", i))
	}
	return `^/(` + strings.Join(names, "|") + `)/([0-9]+)(/(details|history|audit|[a-z]+-[a-z]+))?$`
}()

func regexpHandler(w http.ResponseWriter, r *http.Request) {
	// Compiled on every request.
	re := regexp.MustCompile(routes)
	m := re.FindStringSubmatch("/resource42/12345/history")
	fmt.Fprintln(w, len(m))
}

// page is a page template with a block per section.
var page = func() string {
	var b strings.Builder
	for i := range 40 {
		fmt.Fprintf(&b, `{{define "s%d"}}<section id="s%d">{{range .}}<li>{{.Name}}: {{printf "%%.2f" .Price}}{{if .Sale}} (sale){{end}}</li>{{end}}</section>{{end}}`, i, i)
	}
	b.WriteString(`{{template "s0" .}}`)
	return b.String()
}()

func templateHandler(w http.ResponseWriter, r *http.Request) {
	// Parsed on every request.
	t := template.Must(template.New("page").Parse(page))
	var b bytes.Buffer
	t.Execute(&b, items)
	w.Write(b.Bytes()[:16])
}

var items = []struct {
	Name  string
	Price float64
	Sale  bool
}{{"a", 1, true}, {"b", 2, false}, {"c", 3.5, true}}

func compute() {
	go func() {
		buf := make([]byte, 4096)
		for i := 0; ; i++ {
			sum := sha256.Sum256(buf)
			buf[i%len(buf)] = sum[0]
		}
	}()
}
