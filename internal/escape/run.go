package escape

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// maxOutput bounds the compiler output read from one build.
const maxOutput = 256 << 20

// Options say what to analyse and with which toolchain.
type Options struct {
	// Dir is a directory of the module's source (its root or any
	// directory below it).
	Dir string
	// Package is the package to build, as go build takes it (an import
	// path, or a path relative to the module's root); "" builds the
	// package in Dir.
	Package string
	// GoVersion is the release to run the compiler of ("go1.26.8"), set
	// as GOTOOLCHAIN: escape analysis changes between releases, so it
	// must be the one the program was built with. "" runs the go command
	// found in PATH as it is.
	GoVersion string
	// Tags are the build tags the program was built with.
	Tags string
	// GCFlags are compiler flags the program was built with ("-l"), which
	// change inlining and so escape analysis; a pattern ("all=-l") is
	// dropped, the flags applied to the module's packages.
	GCFlags string
	// Go is the go command to run ("" finds go in PATH).
	Go string
}

// Module is a Go module's root and path.
type Module struct {
	Root string `json:"root"`
	Path string `json:"path"`
}

// FindModule walks up from dir to the go.mod that holds it.
func FindModule(dir string) (Module, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return Module{}, fmt.Errorf("find module of %s: %w", dir, err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			p := modulePath(b)
			if p == "" {
				return Module{}, fmt.Errorf("find module of %s: %s has no module line", dir, filepath.Join(d, "go.mod"))
			}
			return Module{Root: d, Path: p}, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return Module{}, fmt.Errorf("find module of %s: %w", dir, err)
		}
		up := filepath.Dir(d)
		if up == d {
			return Module{}, fmt.Errorf("find module of %s: no go.mod in it or above it", dir)
		}
		d = up
	}
}

var moduleLine = regexp.MustCompile(`^module\s+"?([^"\s]+)"?`)

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if m := moduleLine.FindStringSubmatch(strings.TrimSpace(sc.Text())); m != nil {
			return m[1]
		}
	}
	return ""
}

// Run builds the package with the compiler's escape analysis diagnostics on
// for every package of its module (-gcflags=MODULE/...=-m=2), into a
// temporary directory it removes, and parses them. Positions are absolute.
// A build that fails (a wrong toolchain, source that does not compile)
// fails with the go command's first error line.
func Run(ctx context.Context, o Options) (*Result, Module, error) {
	mod, err := FindModule(o.Dir)
	if err != nil {
		return nil, mod, err
	}
	tmp, err := os.MkdirTemp("", "gosleuth-escape-")
	if err != nil {
		return nil, mod, fmt.Errorf("escape analysis: %w", err)
	}
	defer os.RemoveAll(tmp)
	pkg := o.Package
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, mod, fmt.Errorf("escape analysis: %w", err)
	}
	if pkg != "" {
		dir = mod.Root
	} else {
		pkg = "."
	}
	// -json into the temporary directory makes the flags, and so the
	// build's cache key, new each time: the go command replays cached
	// compiler output with the file paths of the build that produced it,
	// relative to that build's directory, which may not be this one.
	flags := "-m=2 -json=0,file://" + filepath.Join(tmp, "json")
	if g := strings.TrimSpace(o.GCFlags); g != "" {
		if i := strings.IndexByte(g, '='); i > 0 && !strings.HasPrefix(g, "-") {
			g = g[i+1:]
		}
		flags = g + " " + flags
	}
	args := []string{"build", "-o", filepath.Join(tmp, "out"), "-gcflags=" + mod.Path + "/...=" + flags}
	if o.Tags != "" {
		args = append(args, "-tags="+o.Tags)
	}
	args = append(args, pkg)
	goCmd := o.Go
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if o.GoVersion != "" {
		cmd.Env = append(cmd.Env, "GOTOOLCHAIN="+o.GoVersion)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	parsed := make(chan struct{})
	var res *Result
	var perr error
	var head []string
	go func() {
		defer close(parsed)
		var tee bytes.Buffer
		lr := &io.LimitedReader{R: io.TeeReader(pr, &firstLines{buf: &tee, n: 4 << 10}), N: maxOutput}
		res, perr = Parse(lr, dir)
		io.Copy(io.Discard, pr)
		head = strings.Split(strings.TrimSpace(tee.String()), "\n")
		if res != nil && lr.N <= 0 {
			res.Truncated = true
		}
	}()
	err = cmd.Run()
	pw.Close()
	<-parsed
	if err != nil {
		tc := o.GoVersion
		if tc == "" {
			tc = "the go command in PATH"
		}
		return nil, mod, fmt.Errorf("escape analysis of %s in %s with %s: %s", pkg, dir, tc, firstError(head, err))
	}
	if perr != nil {
		return nil, mod, fmt.Errorf("escape analysis of %s: %w", pkg, perr)
	}
	return res, mod, nil
}

// firstLines keeps the first n bytes written to it.
type firstLines struct {
	buf *bytes.Buffer
	n   int
}

func (f *firstLines) Write(b []byte) (int, error) {
	if room := f.n - f.buf.Len(); room > 0 {
		f.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

// firstError picks the go command's error from its output: the first line
// that is not a package header or a diagnostic of the analysis.
func firstError(head []string, err error) string {
	for _, l := range head {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "go: downloading ") {
			continue
		}
		if m := diagLine.FindStringSubmatch(l); m != nil {
			if _, ok := summary(Pos{}, m[4]); ok || strings.HasPrefix(m[4], " ") || header(Pos{}, m[4]) != nil ||
				strings.HasPrefix(m[4], "can inline") || strings.HasPrefix(m[4], "inlining call") || strings.HasPrefix(m[4], "cannot inline") {
				continue
			}
		}
		return l
	}
	return err.Error()
}
