package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWebTokenURL runs gosleuth web as the CLI does: the start-up line
// gives the URL with the token and the users served (SUDO_UID's among
// them under sudo); a browser-like client that opens it gets the page and
// then the API through the cookie, and a client without the token gets 401.
func TestWebTokenURL(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	t.Setenv("SUDO_UID", "4242")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	var stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- runWeb(ctx, &webFlags{listen: "127.0.0.1:0", procRoot: "/proc", history: time.Hour, linger: time.Second}, &stderr, ready)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("web: %v", err)
		}
	}()
	addr := <-ready
	m := regexp.MustCompile(`serving (http://\S+/\?token=[0-9a-f]{32}) to (.*)\n`).FindStringSubmatch(stderr.String())
	if m == nil || !strings.Contains(m[1], addr) {
		t.Fatalf("start-up line %q: want the URL on %s with a token", stderr.String(), addr)
	}
	if isRoot := testenv.Has(testenv.Root); isRoot != strings.Contains(m[2], "uid 4242") {
		t.Errorf("served %q: SUDO_UID's user 4242 should be served when root (root: %v)", m[2], isRoot)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	for _, u := range []string{m[1], "http://" + addr + "/api/procs"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the browser's cookie jar: %d", u, resp.StatusCode)
		}
	}
	resp, err := http.Get("http://" + addr + "/api/procs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /api/procs without the token: %d, want 401", resp.StatusCode)
	}
}
