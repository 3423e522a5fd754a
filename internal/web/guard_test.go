package web

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// nobodyUID is the user the other-user tests connect as.
const nobodyUID = 65534

// requestAs runs testdata/client as user uid, sending each "METHOD URL"
// with the token, and returns the statuses by "METHOD URL".
func requestAs(t *testing.T, uid int, token string, reqs ...string) map[string]int {
	t.Helper()
	args := []string{token}
	for _, r := range reqs {
		m, u, _ := strings.Cut(r, " ")
		args = append(args, m, u)
	}
	cmd := exec.Command(testbin.Build(t, "./testdata/client"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client as uid %d: %v\n%s", uid, err, out)
	}
	got := map[string]int{}
	for l := range strings.Lines(string(out)) {
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(strings.TrimSpace(l[i+1:]))
		got[l[:i]] = n
	}
	return got
}

// TestOtherUserRefused runs the dashboard as root (the test) and asks it,
// as user nobody holding the token, for root's process list, the page, a
// process's history, exact syscall counting of a patient and a profile of
// PID 1: every request is refused with 403 and nothing was started. Told
// to allow nobody, the same dashboard serves the list: the refusal is the
// peer check's, not a broken connection.
func TestOtherUserRefused(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Nobody)
	pid := strconv.Itoa(startPatient(t, nil).Process.Pid)
	s, ts := newTestServer(t, Config{})
	reqs := []string{
		"GET " + ts.URL + "/api/procs",
		"GET " + ts.URL + "/?token=" + s.Token(),
		"GET " + ts.URL + "/assets/app.js",
		"GET " + ts.URL + "/api/history?pid=1",
		"POST " + ts.URL + "/api/syscalls?pid=" + pid + "&mode=exact",
		"POST " + ts.URL + "/api/profile?pid=1&seconds=1",
	}
	for r, code := range requestAs(t, nobodyUID, s.Token(), reqs...) {
		if code != http.StatusForbidden {
			t.Errorf("nobody: %s: %d, want 403", r, code)
		}
	}
	s.mu.Lock()
	watched := len(s.watches)
	s.mu.Unlock()
	if watched != 0 || len(s.profiles.runs) != 0 {
		t.Errorf("after nobody's requests: %d processes watched, %d profiles", watched, len(s.profiles.runs))
	}
	// The same requests as the dashboard's own user pass the guard.
	for r, code := range requestAs(t, os.Getuid(), s.Token(), reqs[0], reqs[1]) {
		if code != http.StatusOK && code != http.StatusSeeOther {
			t.Errorf("root: %s: %d", r, code)
		}
	}

	s2, ts2 := newTestServer(t, Config{AllowUIDs: []int{nobodyUID}})
	for r, code := range requestAs(t, nobodyUID, s2.Token(), "GET "+ts2.URL+"/api/procs") {
		if code != http.StatusOK {
			t.Errorf("nobody, allowed: %s: %d, want 200", r, code)
		}
	}
	for r, code := range requestAs(t, nobodyUID, "wrong", "GET "+ts2.URL+"/api/procs") {
		if code != http.StatusUnauthorized {
			t.Errorf("nobody, allowed, wrong token: %s: %d, want 401", r, code)
		}
	}
}

// TestTokenAndOrigin checks the token and the origin rules for the
// dashboard's own user: no token or a wrong one gets 401; the page load
// with the token sets an HttpOnly, SameSite=Strict cookie and drops the
// token from the address; the cookie then serves; a request whose fetch
// metadata or Origin names another site or another port of the same host
// is refused even with the cookie, and the same request from the page's
// own origin passes.
func TestTokenAndOrigin(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	s, ts := newTestServer(t, Config{})
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := plain.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{"/", "/api/procs", "/api/procs?token=nope", "/assets/app.js"} {
		if code := do("GET", path).StatusCode; code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
	}
	if code := do("GET", "/api/procs", "Authorization", "Bearer x"+s.Token()[1:]).StatusCode; code != http.StatusUnauthorized {
		t.Errorf("wrong bearer token: %d, want 401", code)
	}
	// A stale cookie (an earlier run on this port) does not hide a right
	// bearer token.
	stale := cookieName(httptest.NewRequest("GET", ts.URL, nil)) + "=0123"
	if code := do("GET", "/api/procs", "Cookie", stale, "Authorization", "Bearer "+s.Token()).StatusCode; code != http.StatusOK {
		t.Errorf("stale cookie and the right bearer token: %d, want 200", code)
	}

	resp := do("GET", "/?pid=1&token="+s.Token())
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?pid=1" {
		t.Fatalf("page load with the token: %d to %q, want 303 to /?pid=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	if cookie == nil || cookie.Value != s.Token() || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v: want the token, HttpOnly, SameSite=Strict", cookie)
	}
	ck := "Cookie"
	cv := cookie.Name + "=" + cookie.Value
	if code := do("GET", "/api/procs", ck, cv).StatusCode; code != http.StatusOK {
		t.Errorf("GET /api/procs with the cookie: %d", code)
	}
	self := strconv.Itoa(os.Getpid())
	host := strings.TrimPrefix(ts.URL, "http://")
	_, port, _ := strings.Cut(host, ":")
	otherPort := "http://127.0.0.1:1" + port
	for _, tc := range []struct {
		method, path string
		hdr          []string
		want         int
	}{
		{"POST", "/api/syscalls?pid=" + self + "&mode=bad", []string{"Origin", "http://evil.example"}, 403},
		{"POST", "/api/syscalls?pid=" + self + "&mode=bad", []string{"Origin", otherPort, "Sec-Fetch-Site", "same-site"}, 403},
		{"POST", "/api/syscalls?pid=" + self + "&mode=bad", []string{"Origin", "null"}, 403},
		{"POST", "/api/profile?pid=" + self + "&seconds=0", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"GET", "/api/procs", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"GET", "/api/history?pid=" + self, []string{"Sec-Fetch-Site", "same-site"}, 403},
		// The page's own requests: the guard lets them through to the
		// handler, which refuses the bad mode and the zero seconds.
		{"POST", "/api/syscalls?pid=" + self + "&mode=bad", []string{"Origin", ts.URL, "Sec-Fetch-Site", "same-origin"}, 400},
		{"POST", "/api/profile?pid=" + self + "&seconds=0", []string{"Origin", ts.URL, "Sec-Fetch-Site", "same-origin"}, 400},
		{"GET", "/api/procs", []string{"Sec-Fetch-Site", "same-origin"}, 200},
		// A page load from a link on another site is a navigation: it
		// passes with the cookie (the browser sends a Strict one only
		// when the navigation starts on this site).
		{"GET", "/", []string{"Sec-Fetch-Site", "cross-site"}, 200},
	} {
		hdr := append([]string{ck, cv}, tc.hdr...)
		if code := do(tc.method, tc.path, hdr...).StatusCode; code != tc.want {
			t.Errorf("%s %s %v: %d, want %d", tc.method, tc.path, tc.hdr, code, tc.want)
		}
	}
}

// TestClosedPeerRefused: a client that sent its request and closed its
// socket before the dashboard looked leaves a socket no process holds, which
// the socket table shows as root's (uid 0, inode 0) or not at all. The
// dashboard, run by root, must refuse it rather than take it for root.
func TestClosedPeerRefused(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	r := httptest.NewRequest("GET", "/api/procs", nil)
	r.RemoteAddr = sc.RemoteAddr().String()
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, sc.LocalAddr()))
	if why := s.checkPeer(r); why != "" {
		t.Fatalf("open client socket refused: %s", why)
	}
	c.Close()
	// The client's end goes through FIN_WAIT to a socket of no process.
	waitFor(t, "the closed client socket to be refused", func() bool { return s.checkPeer(r) != "" })
	t.Logf("refused: %s", s.checkPeer(r))
}
