package web

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Who may use the dashboard. A dashboard run as root can read and profile
// every process and attach tracepoints, so it must not lend that to other
// local users or to web pages. Four checks stand between a request and
// the handlers, each closing a way in:
//
//   - Host: only loopback names, so a site that points a name of its own at
//     127.0.0.1 (DNS rebinding) gets no answer it can read.
//   - Peer: the connecting socket's owner, looked up in the kernel's socket
//     table, must be the dashboard's own user, root or a user it was told
//     to allow (Config.AllowUIDs). Another local user is refused even with
//     the token: a browser sends cookies to every port of a host, so a
//     server of theirs on 127.0.0.1 may have seen it.
//   - Token: a secret made at start, printed in the URL; the first page
//     load trades it for an HttpOnly, SameSite=Strict cookie, and every
//     request must carry one or the other (or an Authorization: Bearer
//     header). It guards what the peer check cannot see: connections from
//     beyond loopback (--allow-remote) or from other network namespaces.
//   - Origin: every request but a page load must come from the page's own
//     origin (Sec-Fetch-Site same-origin or none, Origin equal to the
//     Host), and every action that changes anything (exact syscall
//     counting, a profile) is a POST. Another site, or a page on another
//     port of the same host (same-site, so it gets the cookie), can make
//     the browser send a request but not one that is accepted.

// tokenParam is the query parameter carrying the token.
const tokenParam = "token"

// newToken returns a fresh secret of 128 bits, in hex.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make the dashboard's token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Token is the secret every request must carry (see Config.Token).
func (s *Server) Token() string { return s.token }

// cookieName is the token cookie's name for the port r reached: a browser
// keeps one cookie jar for every port of a host, so two dashboards on one
// host keep their tokens apart by name.
func cookieName(r *http.Request) string {
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		port = "80"
	}
	return "gosleuth_token_" + port
}

// tokenOK reports whether r carries the token, in its cookie, its
// Authorization header or its query. Each is tried: a cookie left by an
// earlier run of the dashboard on the same port must not hide a right
// token given another way.
func (s *Server) tokenOK(r *http.Request) bool {
	var got []string
	for _, c := range r.CookiesNamed(cookieName(r)) {
		got = append(got, c.Value)
	}
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = append(got, a)
	}
	got = append(got, r.URL.Query().Get(tokenParam))
	for _, g := range got {
		if g != "" && subtle.ConstantTimeCompare([]byte(g), []byte(s.token)) == 1 {
			return true
		}
	}
	return false
}

// takeToken answers a page load whose query carries the right token: it
// sets the cookie and sends the browser to the same page without the
// token, so the secret leaves the address bar and the history. It
// reports whether it answered.
func (s *Server) takeToken(rw http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	got := q.Get(tokenParam)
	if r.URL.Path != "/" || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		return false
	}
	http.SetCookie(rw, &http.Cookie{Name: cookieName(r), Value: s.token, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	q.Del(tokenParam)
	u := "/"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	http.Redirect(rw, r, u, http.StatusSeeOther)
	return true
}

// crossOrigin says why r, a request other than a page load, does not come
// from the dashboard's own page, or "" when it does. Requests without
// fetch metadata (curl, scripts with the token) pass.
func crossOrigin(r *http.Request) string {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return "request from another site or origin refused (Sec-Fetch-Site: " + sfs + ")"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return "request from origin " + strconv.Quote(o) + " refused: only the dashboard's own page may act"
	}
	return ""
}

// connKey keys a connection's peerCheck in its context.
type connKey struct{}

// peerCheck is one connection's peer verdict, found once.
type peerCheck struct {
	once sync.Once
	why  string
}

// ConnContext, set as the http.Server's ConnContext, makes the peer check
// run once per connection rather than once per request.
func (s *Server) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &peerCheck{})
}

// peerRefused says why the user behind r's connection may not use the
// dashboard, or "" when they may.
func (s *Server) peerRefused(r *http.Request) string {
	if pc, ok := r.Context().Value(connKey{}).(*peerCheck); ok {
		pc.once.Do(func() { pc.why = s.checkPeer(r) })
		return pc.why
	}
	return s.checkPeer(r)
}

// checkPeer finds the socket at the other end of r's connection in the
// socket table and checks its owner. A socket no process holds any more
// (closed by a client that did not wait for the answer) shows owner 0 in
// the table and is refused rather than taken for root's. A peer not in
// the table is on another host or network namespace: allowed, with the
// token, only when the dashboard listens beyond loopback.
func (s *Server) checkPeer(r *http.Request) string {
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "cannot tell who connected: remote address " + strconv.Quote(r.RemoteAddr)
	}
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if la == nil {
		return "cannot tell who connected: no local address"
	}
	local, err := netip.ParseAddrPort(la.String())
	if err != nil {
		return "cannot tell who connected: local address " + strconv.Quote(la.String())
	}
	owner, found, err := s.fs.TCPSocketOwner(remote, local)
	switch {
	case err != nil:
		return "cannot tell who connected: " + err.Error()
	case !found && remote.Addr().Unmap().IsLoopback():
		return "cannot tell who connected: the client's socket is not in the socket table"
	case !found && s.cfg.AnyHost:
		return ""
	case !found:
		return "connections from beyond this host are refused (the dashboard was not started with --allow-remote)"
	case owner.Inode == 0:
		return "cannot tell who connected: the client's socket is already closed"
	case !slices.Contains(s.uids, owner.UID):
		return fmt.Sprintf("user %d may not use this dashboard: it serves %s", owner.UID, s.usersText())
	}
	return ""
}

// usersText names the users the dashboard serves, for refusals and the
// start-up line.
func (s *Server) usersText() string {
	var parts []string
	for _, u := range s.uids {
		parts = append(parts, "uid "+strconv.Itoa(u))
	}
	return strings.Join(parts, ", ") + " (others need --allow-uid)"
}

// Users returns the uids whose connections the dashboard accepts.
func (s *Server) Users() []int { return slices.Clone(s.uids) }
