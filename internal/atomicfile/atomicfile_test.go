package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := WriteBytes(path, []byte("first")); err != nil {
		t.Fatal(err)
	}
	// A failing writer leaves the old file whole and no temporary behind.
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		io.WriteString(w, "half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "first" {
		t.Fatalf("file holds %q after a failed write, want %q", b, "first")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	if err := CheckWritable(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if err := CheckWritable(filepath.Join(dir, "missing", "x")); err == nil || strings.Contains(err.Error(), "gosleuth-check") {
		t.Fatalf("a missing directory: %v, want an error without the probe file's name", err)
	}
	// /proc answers "no such file" to a create in a directory that exists:
	// the error says the directory takes no files, and names no probe file.
	if _, serr := os.Stat("/proc/self"); serr == nil {
		err := CheckWritable("/proc/x")
		if err == nil || strings.Contains(err.Error(), "gosleuth-check") || !strings.Contains(err.Error(), "/proc takes no new files") {
			t.Errorf("/proc/x: %v", err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("check left %d files", len(entries))
	}
}

// TestSpecialTargets writes to what -o may name on a host: a device node, a
// FIFO, symbolic links, a directory, "-". The device nodes are private ones
// made in the test's directory (never the host's /dev).
func TestSpecialTargets(t *testing.T) {
	testenv.Require(t, testenv.Root)
	dir := t.TempDir()
	null := filepath.Join(dir, "null")
	full := filepath.Join(dir, "full")
	if err := unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod null: %v", err)
	}
	if err := unix.Mknod(full, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 7))); err != nil {
		t.Fatalf("mknod full: %v", err)
	}
	stillDevice := func(p string) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s is no longer a character device: %v, %v", p, fi.Mode(), err)
		}
	}

	if err := CheckWritable(null); err != nil {
		t.Errorf("check of a writable device: %v", err)
	}
	if err := WriteBytes(null, []byte("report")); err != nil {
		t.Errorf("write to a null device: %v", err)
	}
	stillDevice(null)
	if err := WriteBytes(full, []byte("report")); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("write to a full device: %v, want ENOSPC", err)
	}
	stillDevice(full)

	// A FIFO gets the whole output; its reader sees it.
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- string(b)
	}()
	if err := WriteBytes(fifo, []byte("through the pipe")); err != nil {
		t.Fatalf("write to a FIFO: %v", err)
	}
	if s := <-got; s != "through the pipe" {
		t.Errorf("FIFO reader got %q", s)
	}
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("FIFO replaced by %v", fi.Mode())
	}

	// A link to a file: the file is written, the link stays a link. A
	// dangling link names the file to create.
	file := filepath.Join(dir, "real.txt")
	os.WriteFile(file, []byte("old"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink("real.txt", link)
	if err := WriteBytes(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "new" {
		t.Errorf("link target holds %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by %v", fi.Mode())
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink("created.txt", dangling)
	if err := WriteBytes(dangling, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "created.txt")); string(b) != "x" {
		t.Errorf("dangling link's target holds %q", b)
	}
	devLink := filepath.Join(dir, "null-link")
	os.Symlink(null, devLink)
	if err := WriteBytes(devLink, []byte("x")); err != nil {
		t.Errorf("write through a link to a device: %v", err)
	}
	stillDevice(null)

	// A directory, and a path whose directory does not exist, are refused
	// by the check with one line.
	if err := CheckWritable(dir); !errors.Is(err, ErrIsDir) {
		t.Errorf("check of a directory: %v", err)
	}
	if err := WriteBytes(dir, []byte("x")); !errors.Is(err, ErrIsDir) {
		t.Errorf("write to a directory: %v", err)
	}
	if err := CheckWritable(filepath.Join(dir, "no", "such", "x")); err == nil {
		t.Error("no error for a missing directory")
	}

	// "-" is standard output.
	var out bytes.Buffer
	Stdout = &out
	defer func() { Stdout = os.Stdout }()
	if err := CheckWritable("-"); err != nil {
		t.Error(err)
	}
	if err := WriteBytes("-", []byte("to stdout")); err != nil || out.String() != "to stdout" {
		t.Errorf("write to -: %q, %v", out.String(), err)
	}
}
