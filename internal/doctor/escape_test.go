package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// TestJoinEscapes diagnoses a patient whose GC cost comes from a
// recursive constructor returning pointers (main.tree), then joins its
// allocation sites with the compiler's escape analysis: with the source
// found from the binary (auto) the site gets the compiler's reason, a
// directory of another module is refused in one line, and "" runs
// nothing.
func TestJoinEscapes(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	pid, _ := startBooks(t, "books", "gcbusy")
	rep, _ := lookBooks(t, pid)
	site := func() *CodeRef {
		for i := range rep.Processes {
			for j := range rep.Processes[i].Findings {
				f := &rep.Processes[i].Findings[j]
				for k := range f.Code {
					if c := &f.Code[k]; f.ID == "gc-pressure" && c.From == "heap profile" && c.Func == "main.tree" {
						return c
					}
				}
			}
		}
		return nil
	}
	if site() == nil {
		t.Fatalf("gc-pressure names no allocation site in main.tree from the heap profile:%s", describe(findingsOf(rep, pid)))
	}
	if notes := JoinEscapes(context.Background(), rep, proc.NewFS("/proc"), ""); notes != nil || site().Escape != nil {
		t.Fatalf("no source given: notes %q, escape %+v; want nothing run", notes, site().Escape)
	}
	notes := JoinEscapes(context.Background(), rep, proc.NewFS("/proc"), t.TempDir())
	if len(notes) != 1 || !strings.Contains(notes[0], "no go.mod") || site().Escape != nil {
		t.Fatalf("a directory outside any module: notes %q, escape %+v; want one line saying there is no go.mod", notes, site().Escape)
	}
	notes = JoinEscapes(context.Background(), rep, proc.NewFS("/proc"), "auto")
	t.Logf("notes %q", notes)
	e := site().Escape
	if e == nil || e.None {
		t.Fatalf("main.tree's allocation got no reason (%+v); notes %q", e, notes)
	}
	// return &node{...}: the compiler says the composite literal escapes
	// to the heap because it is returned.
	if !strings.Contains(e.Reason, "escapes to heap") || e.Class != "returned" || e.Fix == "" {
		t.Errorf("main.tree's reason %+v, want the compiler's \"escapes to heap\", class returned, with a fix", e)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "module github.com/gosleuth/gosleuth") {
		t.Errorf("notes %q, want one saying what was joined in which module", notes)
	}
	var b strings.Builder
	if err := rep.WriteText(&b, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "escapes: "+e.Reason) {
		t.Errorf("the text report does not show the reason under the site:\n%s", b.String())
	}
}
