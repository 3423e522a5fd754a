package escape

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// programTimeout bounds the escape analysis build of a large module.
const programTimeout = 5 * time.Minute

// Frame is a frame of an allocation site's stack.
type Frame struct {
	Func string
	File string
	Line int
}

// ProgramOptions say which running program to analyse and where its
// source is.
type ProgramOptions struct {
	// FS and PID are the running program: its binary's build information
	// (module, Go release, tags, compiler flags) is read through
	// /proc/PID/exe.
	FS  proc.FS
	PID int
	// Src is a directory of the program's module source, or "auto": the
	// directory of the program's main package, found from Frames' file
	// paths where they exist on this machine and belong to root or to
	// the program's owner (the go command runs there with gosleuth's
	// privileges).
	Src    string
	Frames []Frame
	// GoVersion overrides the release the compiler runs (default: the
	// one the binary was built with).
	GoVersion string
}

// Program is the compiler's escape analysis of a running program's
// module, ready to join with its allocation sites.
type Program struct {
	Module    Module
	Toolchain string
	Result    *Result
}

// Join is the compiler's reason at an allocation site.
type Join struct {
	// File and Line are where the compiler was asked: the innermost
	// frame of the site's stack in the module's code.
	File string `json:"file"`
	Line int    `json:"line"`
	// Via is the function outside the module the allocation happened in,
	// called from that line ("fmt.Sprintf"), when it did.
	Via string `json:"via,omitempty"`
	// Reasons are the compiler's findings at the line; none where it
	// reported no escape there.
	Reasons []Reason `json:"reasons,omitempty"`
}

// Reason is one finding of the compiler with its class and fix.
type Reason struct {
	Reason     string   `json:"reason"`
	Class      string   `json:"class"`
	Suggestion string   `json:"suggestion"`
	Flow       []string `json:"flow,omitempty"`
}

// AnalyseProgram finds the running program's module source, checks it is
// the module the binary was built from, and runs the compiler's escape
// analysis on it with the binary's Go release, tags and compiler flags.
// Every failure (no build information, no source, another module, a
// toolchain that cannot run) is one line.
func AnalyseProgram(ctx context.Context, o ProgramOptions) (*Program, error) {
	exe := o.FS.PID(o.PID, "exe")
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		return nil, fmt.Errorf("no build information in %s: %w", exe, err)
	}
	dir := o.Src
	if dir == "auto" {
		if dir = mainDir(o.Frames); dir == "" {
			return nil, fmt.Errorf("no source of the program's main package on this machine (its file paths do not exist here, or the binary was built with -trimpath): give --src DIR")
		}
	}
	mod, err := FindModule(dir)
	if err != nil {
		return nil, err
	}
	if o.Src == "auto" {
		if err := checkOwner(o.FS, o.PID, mod.Root); err != nil {
			return nil, err
		}
	}
	if bi.Main.Path != "" && bi.Main.Path != mod.Path {
		return nil, fmt.Errorf("the source at %s is module %s, the program was built from module %s", mod.Root, mod.Path, bi.Main.Path)
	}
	p := &Program{Module: mod, Toolchain: bi.GoVersion}
	if o.GoVersion != "" {
		p.Toolchain = o.GoVersion
	}
	eo := Options{Dir: mod.Root, Package: bi.Path, GoVersion: p.Toolchain}
	if bi.Path == "command-line-arguments" || bi.Path == "" {
		eo.Package, eo.Dir = "", dir
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "-tags":
			eo.Tags = s.Value
		case "-gcflags":
			eo.GCFlags = s.Value
		}
	}
	ctx, cancel := context.WithTimeout(ctx, programTimeout)
	defer cancel()
	if p.Result, _, err = Run(ctx, eo); err != nil {
		return nil, err
	}
	return p, nil
}

// mainDir finds the directory of the program's main package from the
// frames' file paths, where one exists on this machine.
func mainDir(frames []Frame) string {
	for _, fr := range frames {
		if !strings.HasPrefix(fr.Func, "main.") || !filepath.IsAbs(fr.File) {
			continue
		}
		if _, err := os.Stat(fr.File); err == nil {
			return filepath.Dir(fr.File)
		}
	}
	return ""
}

// checkOwner refuses a source directory found from the target's own file
// paths (hostile input) unless the module's root and go.mod belong to
// root or to the process's owner: the go command is run there, with
// gosleuth's privileges.
func checkOwner(pfs proc.FS, pid int, modDir string) error {
	d, err := pfs.Open(pid)
	if err != nil {
		return fmt.Errorf("owner of process %d: %w", pid, err)
	}
	fi, err := d.Stat()
	d.Close()
	if err != nil {
		return fmt.Errorf("owner of process %d: %w", pid, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("owner of process %d: not known on this system", pid)
	}
	want := st.Uid
	for _, src := range []string{modDir, filepath.Join(modDir, "go.mod")} {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != 0 && uid != want {
			return fmt.Errorf("the source the program names, %s, belongs to uid %d, neither root nor the program's owner (uid %d): give --src %s to build it anyway", src, uid, want, modDir)
		}
	}
	return nil
}

// inModule returns file's path relative to the module's root, for a path
// of the build machine under the root or a -trimpath path under the
// module's path.
func inModule(mod Module, file string) (string, bool) {
	for _, pre := range []string{mod.Root + string(filepath.Separator), mod.Path + "/"} {
		if rel, ok := strings.CutPrefix(file, pre); ok {
			return rel, true
		}
	}
	return "", false
}

// Join finds the compiler's reasons at the innermost frame of stack
// (innermost first) in the module's code; nil when no frame is in it.
func (p *Program) Join(stack []Frame) *Join {
	for i, f := range stack {
		rel, ok := inModule(p.Module, f.File)
		if !ok {
			continue
		}
		j := &Join{File: f.File, Line: f.Line}
		if i > 0 {
			j.Via = stack[i-1].Func
		}
		for _, fd := range p.Result.At(filepath.Join(p.Module.Root, rel), f.Line) {
			c := fd.Class()
			// An allocation the compiler keeps off the heap is a reason
			// only where nothing at the line escapes and the site is the
			// line itself (a make whose size is known only at run time).
			if fd.Kind == NoEscape && (len(j.Reasons) > 0 || i > 0 || !fd.Allocation()) {
				continue
			}
			if fd.Kind == Leaks {
				continue
			}
			j.Reasons = append(j.Reasons, Reason{Reason: fd.Reason(), Class: string(c), Suggestion: c.Suggestion(), Flow: fd.Flow})
			if len(j.Reasons) == 3 {
				break
			}
		}
		return j
	}
	return nil
}
