// Package atomicfile writes output files completely or not at all, and
// never harms what the output path names.
//
// A regular file (or a new one) is written to a temporary file in the same
// directory and renamed over the target only once it is whole: a report cut
// short by an error or a full disk never replaces a good file with half of
// one. gosleuth runs as root, so the path is looked at first: a symbolic
// link is followed (the link stays, its target is written), a device, FIFO
// or socket is written through (never replaced by a regular file: as root,
// a rename over /dev/null would break it for every user), a directory is
// refused, and "-" means standard output. Check says all this before a
// command starts its work, so a bad path never costs a whole window.
package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Stdout is where the path "-" writes.
var Stdout io.Writer = os.Stdout

// ErrIsDir reports an output path that names a directory.
var ErrIsDir = errors.New("is a directory (give a file name)")

// target is what an output path resolves to.
type target struct {
	path    string // after following symbolic links
	special bool   // an existing device, FIFO or socket: written through
	stdout  bool
}

// resolve follows path's symbolic links and classifies what it names.
func resolve(path string) (target, error) {
	if path == "-" {
		return target{stdout: true}, nil
	}
	if path == "" {
		return target{}, errors.New("empty output path")
	}
	real := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// Follow the chain; a dangling link names the file to create.
		r, err := filepath.EvalSymlinks(path)
		if err != nil {
			dest, lerr := os.Readlink(path)
			if lerr != nil {
				return target{}, fmt.Errorf("follow link %s: %w", path, lerr)
			}
			if !filepath.IsAbs(dest) {
				dest = filepath.Join(filepath.Dir(path), dest)
			}
			r = dest
		}
		real = r
	}
	fi, err := os.Stat(real)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return target{path: real}, nil
	case err != nil:
		return target{}, err
	case fi.IsDir():
		return target{}, fmt.Errorf("%s: %w", path, ErrIsDir)
	case fi.Mode().IsRegular():
		return target{path: real}, nil
	default:
		return target{path: real, special: true}, nil
	}
}

// Write calls write with a temporary file next to path's target and, when
// it and closing the file succeed, renames the file to the target (mode
// 0644). On any error the temporary file is removed and the target is left
// as it was. Devices, FIFOs and sockets get the whole output in one write
// after write succeeded; "-" goes to Stdout the same way.
func Write(path string, write func(io.Writer) error) error {
	t, err := resolve(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if t.stdout || t.special {
		var buf bytes.Buffer
		if err := write(&buf); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if t.stdout {
			_, err = Stdout.Write(buf.Bytes())
		} else {
			err = writeThrough(t.path, buf.Bytes())
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(t.path), "."+filepath.Base(t.path)+".tmp-*")
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
		err = os.Rename(name, t.path)
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeThrough writes b to an existing special file without creating,
// truncating or replacing it.
func writeThrough(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteBytes writes b to path with Write.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// CheckWritable fails, with one clear reason, when Write to path could not
// succeed: a directory, a missing parent directory, a directory or special
// file this user may not write. Commands call it before their work starts.
func CheckWritable(path string) error {
	t, err := resolve(path)
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	switch {
	case t.stdout:
		return nil
	case t.special:
		// Opening a FIFO for writing would block until a reader comes:
		// look at the permission bits instead.
		if err := accessW(t.path); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(t.path), ".gosleuth-check-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, createErr(filepath.Dir(t.path), err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// createErr is why a file could not be created in dir, without the name
// of the probe file CheckWritable tried: a directory that exists but
// answers "no such file" to a create (/proc, /sys) is said to take no new
// files.
func createErr(dir string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return fmt.Errorf("%s takes no new files (a kernel file system such as /proc or /sys?)", dir)
		}
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	return err
}

// CheckDir fails when dir is not an existing directory this user can create
// files in (for commands that write several files into one directory).
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot write into %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot write into %s: not a directory", dir)
	}
	return CheckWritable(filepath.Join(dir, "x"))
}
