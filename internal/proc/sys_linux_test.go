package proc

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRawReaderAt: rawReaderAt reads as an io.ReaderAt must: all of p, or
// what is left before the end with io.EOF.
func TestRawReaderAt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, tc := range []struct {
		off  int64
		size int
		want string
		eof  bool
	}{
		{0, 4, "0123", false},
		{6, 4, "6789", false},
		{8, 4, "89", true},
		{10, 4, "", true},
	} {
		p := make([]byte, tc.size)
		n, err := rawReaderAt(fd).ReadAt(p, tc.off)
		if got := string(p[:n]); got != tc.want || (err == io.EOF) != tc.eof || (err != nil && err != io.EOF) {
			t.Errorf("ReadAt(%d bytes at %d) = %q, %v; want %q, EOF %v", tc.size, tc.off, got, err, tc.want, tc.eof)
		}
	}
}
