package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// internalWords are what a message to a user must not show: gosleuth's
// own source files, a Go stack trace, a temporary file's name.
var internalWords = regexp.MustCompile(`\.go:\d|internal/|goroutine \d|panic|runtime error|\.tmp-|\.gosleuth-check-|/tmp/gosleuth|0x[0-9a-f]{6,}`)

// askRoot is output asking for root, a contradiction when gosleuth runs
// as root.
var askRoot = regexp.MustCompile(`(?i)\b(run|rerun|try)( it)? as root|\bneeds? root|without root|with sudo`)

// TestFirstRun is a new user's first run of every command: its --help,
// one real run against a real target (servers started and stopped), and
// three bad inputs. Help and a real run exit 0 with output, no error line
// and, as root, no request for root; a bad input exits non-zero (2 for
// bad usage) with one error line on stderr, last (notes may come before
// it; after bad usage, the pointer to the command's help follows), and no
// error names gosleuth's own files or shows a stack.
func TestFirstRun(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	p := testbin.Start(t, exec.Command(testbin.Build(t, "../../internal/probe/testdata/patient"), "-mode", "sleep"), testbin.Options{})
	pid := strconv.Itoa(p.PID())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") }))
	defer srv.Close()
	const gone = "536870000" // above pid_max's ceiling: never a process
	root := testenv.Has(testenv.Root)
	type bad struct {
		args []string
		code int
	}
	rows := []struct {
		cmd  string
		real []string // nil for a server: started, asked for its page, stopped
		root bool     // the real run needs root
		bad  []bad
	}{
		{"help", []string{"help"}, false, []bad{
			{[]string{"help", "nosuch"}, 2}, {[]string{"help", "top", "doctor"}, 2}, {[]string{"help", "--bogus"}, 2}}},
		{"version", []string{"version"}, false, []bad{
			{[]string{"version", "x"}, 2}, {[]string{"version", "--bogus"}, 2}, {[]string{"version", "--format", "xml"}, 2}}},
		{"doctor", []string{"doctor", "--pid", pid, "--duration", "2s"}, false, []bad{
			{[]string{"doctor", "--pid", gone, "--duration", "2s"}, 1}, {[]string{"doctor", "--duration", "5"}, 2},
			{[]string{"doctor", "--pid", pid, "--pprof-url", "localhost:6060"}, 2}}},
		{"top", []string{"top", "--pid", pid, "--once"}, false, []bad{
			{[]string{"top", "--pid", gone, "--once"}, 1}, {[]string{"top", "--interval", "soon"}, 2}, {[]string{"top", "--bogus"}, 2}}},
		{"syscalls", []string{"syscalls", "--pid", pid, "--duration", "1s", "--only", "nanosleep,futex"}, true, []bad{
			{[]string{"syscalls", "--pid", gone, "--duration", "1s"}, 1}, {[]string{"syscalls", "--pid", pid, "--duration", "5"}, 2},
			{[]string{"syscalls", "--pid", pid, "--duration", "1s", "--only", "futx"}, 2}}},
		{"profile", []string{"profile", "--pid", pid, "--duration", "1s"}, false, []bad{
			{[]string{"profile", "--pid", gone, "--duration", "1s"}, 1}, {[]string{"profile", "--pid", pid, "--hz", "lots"}, 2},
			{[]string{"profile", "--pid", pid, "--duration", "1s", "-o", "/proc/x"}, 1}}},
		{"probe", []string{"probe", "--pid", pid, "--duration", "1s", "time.Sleep"}, true, []bad{
			{[]string{"probe", "--pid", gone, "time.Sleep"}, 1}, {[]string{"probe", "--pid", pid, "--budget", "lots", "time.Sleep"}, 2},
			{[]string{"probe", "--pid", pid, "--recipe", "timer"}, 2}}},
		{"inspect", []string{"inspect", "--pid", pid, "--duration", "1s"}, false, []bad{
			{[]string{"inspect", "--pid", gone}, 1}, {[]string{"inspect", "--pid", pid, "--pprof-url", "http://"}, 2},
			{[]string{"inspect", "--pid", pid, "--duration", "5"}, 2}}},
		{"load", []string{"load", srv.URL, "--rate", "20", "--duration", "1s", "--connections", "2", "--max-lag", "500ms"}, false, []bad{
			{[]string{"load", "http://127.0.0.1:1/", "--rate", "20", "--duration", "1s"}, 1},
			{[]string{"load", "ftp://127.0.0.1/", "--rate", "10", "--duration", "1s"}, 2},
			{[]string{"load", srv.URL, "--rate", "lots", "--duration", "1s"}, 2}}},
		{"compare", []string{"compare", "--quiet", "--window", "200ms", "--windows", "4", "--warmup", "100ms", "--syscalls", "off",
			"sleep 30", "sleep 31"}, false, []bad{
			{[]string{"compare", "sleep 30"}, 2}, {[]string{"compare", "--noise", "2x", "sleep 30", "sleep 31"}, 2},
			{[]string{"compare", "--pid-a", gone, "--pid-b", pid, "--windows", "2", "--window", "200ms"}, 1}}},
		{"exporter", nil, false, []bad{
			{[]string{"exporter", "--listen", "nowhere"}, 2}, {[]string{"exporter", "--interval", "soon"}, 2}, {[]string{"exporter", "--bogus"}, 2}}},
		{"web", nil, false, []bad{
			{[]string{"web", "--pid", gone}, 1}, {[]string{"web", "--listen", "nowhere"}, 2}, {[]string{"web", "--bogus"}, 2}}},
	}
	seen := map[string]bool{}
	for _, row := range rows {
		seen[row.cmd] = true
	}
	for _, c := range commands {
		if !seen[c.Name] {
			t.Errorf("no first run for %q: add a row", c.Name)
		}
	}
	clean := func(t *testing.T, what, text string) {
		t.Helper()
		if m := internalWords.FindString(text); m != "" {
			t.Errorf("%s shows %q:\n%s", what, m, text)
		}
	}
	for _, row := range rows {
		t.Run(row.cmd, func(t *testing.T) {
			stdout, stderr, code := runChild(t, os.Args[0], nil, row.cmd, "--help")
			if code != 0 || !strings.Contains(stdout, "Usage: gosleuth "+row.cmd) || stderr != "" {
				t.Errorf("--help: exit %d, stdout %.80q, stderr %q", code, stdout, stderr)
			}
			switch {
			case row.real == nil:
				stdout, stderr = serveOnce(t, row.cmd)
			case row.root && !root:
			default:
				start := time.Now()
				stdout, stderr, code = runChild(t, os.Args[0], nil, row.real...)
				t.Logf("%s: %v", strings.Join(row.real, " "), time.Since(start).Round(time.Millisecond))
				if code != 0 || strings.TrimSpace(stdout) == "" {
					t.Errorf("%s: exit %d, stdout %q, stderr %q", strings.Join(row.real, " "), code, stdout, stderr)
				}
			}
			clean(t, "the real run's stderr", stderr)
			// A run that worked prints no error, and does not ask root
			// for root.
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "gosleuth: ") && !strings.HasPrefix(l, "gosleuth: note: ") && !strings.HasPrefix(l, "gosleuth "+row.cmd+": serving ") {
					t.Errorf("the real run printed an error line and exited 0: %q", l)
				}
			}
			if m := askRoot.FindString(stdout + stderr); root && m != "" {
				t.Errorf("the real run, as root, says %q:\n%s%s", m, stdout, stderr)
			}
			for _, b := range row.bad {
				what := strings.Join(b.args, " ")
				stdout, stderr, code := runChild(t, os.Args[0], nil, b.args...)
				// Notes may come first; the error is the one line that
				// starts with "gosleuth: " and is not a note, last but for
				// the pointer to the command's help after bad usage
				// (help's own errors point to "gosleuth help" already).
				lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
				if lines[len(lines)-1] == "run 'gosleuth help "+row.cmd+"' for its flags" {
					lines = lines[:len(lines)-1]
				} else if code == 2 && row.cmd != "help" {
					t.Errorf("%s: no pointer to the help after bad usage:\n%s", what, stderr)
				}
				var errs int
				for _, l := range lines {
					if strings.HasPrefix(l, "gosleuth: ") && !strings.HasPrefix(l, "gosleuth: note: ") {
						errs++
					}
				}
				if code != b.code || errs != 1 || len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], "gosleuth: ") {
					t.Errorf("%s: exit %d (want %d), stderr:\n%s", what, code, b.code, stderr)
				}
				if len(lines) > 1 {
					t.Logf("%s: notes before the error: %q", what, lines[:len(lines)-1])
				}
				clean(t, what+": stderr", stderr)
				clean(t, what+": stdout", stdout)
			}
		})
	}
}

// serveOnce starts a server command (exporter, web) on a free port, asks
// it for its page, stops it with SIGTERM and requires exit 0; it returns
// what it printed.
func serveOnce(t *testing.T, name string) (stdout, stderr string) {
	t.Helper()
	cmd, out, r := cliChild(t, nil, os.Args[0], name, "--listen", "127.0.0.1:0")
	first, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s said %q before it ended: %v", name, first, err)
	}
	rest := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); rest <- string(b) }()
	m := regexp.MustCompile(`serving (http://\S+)`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("%s's first line %q names no URL", name, first)
	}
	// The web page's URL carries a token the page turns into a cookie.
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar, Timeout: 10 * time.Second}).Get(m[1])
	if err != nil {
		t.Fatalf("GET %s: %v", m[1], err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", m[1], resp.Status)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if err != nil {
		t.Errorf("%s after SIGTERM: %v", name, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%s took %v to stop after SIGTERM", name, d)
	}
	return out.String(), fmt.Sprint(first, <-rest)
}
