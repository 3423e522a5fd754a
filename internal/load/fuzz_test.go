package load

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadResponse checks the hand-written HTTP/1 parser against
// net/http.ReadResponse: it must never panic, and where both accept a reply
// they must agree on its status and on where it ends (framing decides which
// bytes belong to the next reply on a kept-alive connection).
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nNEXT",
		"HTTP/1.1 503 Busy\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nbody to EOF",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nxNEXT",
		"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\nNEXT",
		"HTTP/1.1 304 Not Modified\r\n\r\nNEXT",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nokNEXT",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\nNEXT",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(bytes.NewReader(in))
		r, err := readResponse(br, false)
		if err != nil {
			return
		}
		rest, _ := io.ReadAll(br)
		ourRest := len(rest)
		// net/http answers interim (1xx) replies itself; compare final ones.
		if bytes.HasPrefix(in, []byte("HTTP/1.1 1")) || bytes.HasPrefix(in, []byte("HTTP/1.0 1")) {
			return
		}
		nbr := bufio.NewReader(bytes.NewReader(in))
		resp, err := http.ReadResponse(nbr, nil)
		if err != nil {
			return // net/http is stricter about header syntax
		}
		_, berr := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if berr != nil {
			return
		}
		if resp.StatusCode != r.status {
			t.Fatalf("status %d, net/http %d, input %q", r.status, resp.StatusCode, in)
		}
		theirRest, _ := io.ReadAll(nbr)
		if len(theirRest) != ourRest {
			t.Fatalf("reply ends with %d bytes left, net/http %d, input %q", ourRest, len(theirRest), in)
		}
	})
}
