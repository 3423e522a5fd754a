package doctor

import (
	"context"
	"fmt"

	"github.com/gosleuth/gosleuth/internal/escape"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// maxEscapePrograms bounds the programs one report runs the compiler for:
// each is a build of the program's module.
const maxEscapePrograms = 2

// JoinEscapes runs the compiler's escape analysis of each Go program whose
// findings at warn or above name allocation sites from the heap profile
// (the GC, heap-holder and goroutine-memory findings), where the program's
// source is at hand, and attaches to each site the reason its value is on
// the heap and the usual fix. src is a directory of the module's source
// (with one --pid) or "auto": the directory of the main package named by
// the binary's own file paths, where it exists on this machine and belongs
// to root or to the program's owner. It returns notes saying what was
// joined and, in one line each, why a program's join could not run.
func JoinEscapes(ctx context.Context, rep *Report, fs proc.FS, src string) []string {
	if src == "" {
		return nil
	}
	var notes []string
	ran := 0
	for i := range rep.Processes {
		p := &rep.Processes[i]
		refs := allocRefs(p)
		if len(refs) == 0 {
			continue
		}
		if ran == maxEscapePrograms {
			notes = append(notes, fmt.Sprintf("escape analysis: not run for process %d (at most %d programs a report)", p.PID, maxEscapePrograms))
			continue
		}
		ran++
		var frames []escape.Frame
		for _, c := range refs {
			frames = append(frames, refFrames(c)...)
		}
		prog, err := escape.AnalyseProgram(ctx, escape.ProgramOptions{FS: fs, PID: p.PID, Src: src, Frames: frames})
		if err != nil {
			notes = append(notes, fmt.Sprintf("escape analysis of process %d: %v", p.PID, err))
			continue
		}
		joined := 0
		for _, c := range refs {
			j := prog.Join(refFrames(c))
			if j == nil {
				continue
			}
			if len(j.Reasons) == 0 {
				c.Escape = &EscapeReason{None: true, Via: j.Via}
				continue
			}
			r := j.Reasons[0]
			c.Escape = &EscapeReason{Reason: r.Reason, Class: r.Class, Fix: r.Suggestion, Via: j.Via}
			joined++
		}
		notes = append(notes, fmt.Sprintf("escape analysis of process %d (module %s, %s): the compiler's reason found for %d of %d allocation sites named", p.PID, prog.Module.Path, prog.Toolchain, joined, len(refs)))
	}
	return notes
}

// allocRefs returns the allocation sites the process's findings at warn
// or above name from the heap profile.
func allocRefs(p *ProcessReport) []*CodeRef {
	var out []*CodeRef
	for i := range p.Findings {
		f := &p.Findings[i]
		if f.Severity < Warn {
			continue
		}
		for j := range f.Code {
			if c := &f.Code[j]; c.From == "heap profile" && c.Line > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

// refFrames is the site's stack as far as the reference knows it: where
// the allocation happened, then the program's line that led to it.
func refFrames(c *CodeRef) []escape.Frame {
	own := escape.Frame{Func: c.Func, File: c.File, Line: c.Line}
	if c.alloc == nil {
		return []escape.Frame{own}
	}
	return []escape.Frame{{Func: c.alloc.Func, File: c.alloc.File, Line: c.alloc.Line}, own}
}
