// Package atomicfile writes output files completely or not at all: the
// content goes to a temporary file in the same directory, which is renamed
// over the target only once it is whole. A report or profile cut short by an
// error or a full disk never replaces a good file with half of one.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write calls write with a temporary file next to path and, when it and
// closing the file succeed, renames the file to path (mode 0644). On any
// error the temporary file is removed and path is left as it was.
func Write(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	err = write(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(name, 0o644)
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteBytes writes b to path with Write.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(b))
		return err
	})
}

// CheckWritable fails when path's directory does not accept a new file, so
// that a command can refuse a bad output path before it starts its work.
func CheckWritable(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".gosleuth-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
