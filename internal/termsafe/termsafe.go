// Package termsafe makes text from other processes safe to print on a
// terminal.
//
// gosleuth runs as root and prints what any local user controls: process
// names (PR_SET_NAME), command lines, paths, goroutine labels, function
// names read from binaries. Printed raw, an escape sequence in any of them
// reaches root's terminal: it can set the title, clear the screen, recolour,
// or on some terminals write the clipboard (OSC 52). Every text view passes
// such strings through String, or writes through a Writer. JSON output needs
// none of this: encoding/json escapes control characters itself.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every control character (C0 but tab and newline,
// DEL, C1) written as a Go escape (\x1b, \u009b) and every byte of invalid
// UTF-8 as \xNN. Printable text, tabs and newlines are kept as they are.
func String(s string) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 && r != '\t' && r != '\n', r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safe reports whether s needs no escaping (the common case, checked
// without allocating).
func safe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			return safeUTF8(s[i:])
		}
	}
	return true
}

func safeUTF8(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r < 0x20 && r != '\t' && r != '\n' || r >= 0x7f && r < 0xa0 {
			return false
		}
		i += n
	}
	return true
}

// Writer escapes everything written through it with String. Each Write is
// escaped on its own, so a writer that splits one character over two
// writes shows it as escaped bytes.
type Writer struct{ w io.Writer }

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w} }

// Write writes the escaped form of p and reports len(p) on success.
func (w *Writer) Write(p []byte) (int, error) {
	s := String(string(p))
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
