package load

// Why a hand-written HTTP/1.1 client: the generator must cost far less than
// the server it loads (the goal is at least 35k requests per generator
// CPU-second on one core). net/http's client spends several allocations, a
// goroutine hand-off per connection (its readLoop and writeLoop) and a map
// of header values per request; here a request is one write of prebuilt
// bytes and a response is parsed in place from a reused bufio.Reader, on one
// goroutine per connection. Only what a load test needs is handled:
// keep-alive, Content-Length, chunked bodies, "Connection: close", HTTP/1.0
// replies, 1xx interim responses and bodiless replies (HEAD, 204, 304).
// Everything else (TLS, HTTP/2) goes through net/http.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// errMalformed marks a response the parser does not understand.
var errMalformed = errors.New("malformed HTTP response")

// buildRequest returns the bytes of one HTTP/1.1 request.
func buildRequest(c *Config) []byte {
	var b bytes.Buffer
	path := c.URL.RequestURI()
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", c.Method, path, c.URL.Host)
	hasUA := false
	for _, h := range c.Headers {
		if equalFold(h.Name, "user-agent") {
			hasUA = true
		}
		if equalFold(h.Name, "host") || equalFold(h.Name, "content-length") {
			continue
		}
		fmt.Fprintf(&b, "%s: %s\r\n", h.Name, h.Value)
	}
	if !hasUA {
		b.WriteString("User-Agent: gosleuth-load\r\n")
	}
	if len(c.Body) > 0 || c.Method == "POST" || c.Method == "PUT" || c.Method == "PATCH" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(c.Body))
	}
	b.WriteString("\r\n")
	b.Write(c.Body)
	return b.Bytes()
}

// h1conn is one keep-alive connection with its reader.
type h1conn struct {
	c        net.Conn
	br       *bufio.Reader
	deadline time.Time
	used     bool // at least one response was read on it
	stop     func() bool
}

// response is what the parser keeps of a reply.
type response struct {
	status int
	close  bool // the server will close the connection after it
}

// roundTrip writes req and reads one response. head says the method was
// HEAD (the reply has no body whatever its headers say).
func (h *h1conn) roundTrip(req []byte, head bool) (response, error) {
	if _, err := h.c.Write(req); err != nil {
		return response{}, err
	}
	return readResponse(h.br, head)
}

// readResponse parses one response from br and discards its body.
func readResponse(br *bufio.Reader, head bool) (response, error) {
	for {
		r, length, chunked, err := readHead(br)
		if err != nil {
			return r, err
		}
		if r.status >= 100 && r.status < 200 && r.status != 101 {
			continue // interim response; the real one follows
		}
		switch {
		case head || r.status == 204 || r.status == 304:
		case chunked:
			err = discardChunked(br)
		case length >= 0:
			_, err = br.Discard(int(length))
		default:
			// No length: the body runs to the end of the connection.
			_, err = io.Copy(io.Discard, br)
			r.close = true
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return r, err
	}
}

// readHead reads the status line and headers. length is -1 when there is no
// Content-Length.
func readHead(br *bufio.Reader) (r response, length int64, chunked bool, err error) {
	length = -1
	line, err := readLine(br)
	if err != nil {
		return r, length, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return r, length, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	code, ok := atoi3(line[9:12])
	if !ok {
		return r, length, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	r.status = code
	http10 := line[7] == '0'
	r.close = http10
	for {
		line, err = readLine(br)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return r, length, chunked, err
		}
		if len(line) == 0 {
			return r, length, chunked, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return r, length, chunked, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case equalFoldBytes(name, "content-length"):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return r, length, chunked, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
			length = n
		case equalFoldBytes(name, "transfer-encoding"):
			// Chunked framing applies when chunked is the last coding
			// (RFC 9112 6.1), and never to HTTP/1.0, which has no
			// Transfer-Encoding: such a body runs to the end of the
			// connection, as net/http reads it.
			last := value[bytes.LastIndexByte(value, ',')+1:]
			chunked = !http10 && equalFoldBytes(bytes.TrimSpace(last), "chunked")
		case equalFoldBytes(name, "connection"):
			if containsFold(value, "close") {
				r.close = true
			} else if http10 && containsFold(value, "keep-alive") {
				r.close = false
			}
		}
	}
}

// discardChunked skips a chunked body and its trailer.
func discardChunked(br *bufio.Reader) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 {
			for { // trailer, up to the empty line
				line, err := readLine(br)
				if err != nil {
					return err
				}
				if len(line) == 0 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n)); err != nil {
			return err
		}
		if line, err := readLine(br); err != nil || len(line) != 0 {
			if err == nil {
				err = fmt.Errorf("%w: no CRLF after chunk", errMalformed)
			}
			return err
		}
	}
}

// readLine returns one line without its CR LF; the slice is valid until the
// next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformed, br.Size())
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func atoi3(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFoldBytes reports whether b equals the lower-case ASCII word s,
// ignoring case.
func equalFoldBytes(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

func equalFold(a, s string) bool { return equalFoldBytes([]byte(a), s) }

// containsFold reports whether b contains the lower-case word s, ignoring
// case.
func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if equalFoldBytes(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}
