package main

import (
	"bytes"
	"context"
	"flag"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the root of the source tree, seen from this package's
// directory (go test runs a package's tests in its directory).
const repoRoot = "../.."

// TestHelpEveryCommand runs "gosleuth help NAME" for every command: it
// exits 0 and prints the usage, every flag, one example and the page under
// docs/ that documents the command; that page exists and names every flag.
func TestHelpEveryCommand(t *testing.T) {
	if len(commands) < 12 {
		t.Fatalf("%d commands registered, want at least 12", len(commands))
	}
	for _, c := range commands {
		t.Run(c.Name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := run(context.Background(), []string{"help", c.Name}, &out, &errb); err != nil {
				t.Fatalf("gosleuth help %s: %v", c.Name, err)
			}
			text := out.String()
			page := docPage(c)
			if want := "docs/" + c.Name + ".md"; c.Name != "help" && c.Name != "version" && page != want {
				t.Errorf("page %s, want %s", page, want)
			}
			for _, want := range []string{"Usage: gosleuth " + c.Name, "Example:\n  ", "Documentation: " + page} {
				if !strings.Contains(text, want) {
					t.Errorf("help %s lacks %q:\n%s", c.Name, want, text)
				}
			}
			if !strings.Contains(helpExamples[c.Name], "gosleuth "+c.Name) {
				t.Errorf("example %q does not run gosleuth %s", helpExamples[c.Name], c.Name)
			}
			doc, err := os.ReadFile(filepath.Join(repoRoot, page))
			if err != nil {
				t.Fatalf("the page help names: %v", err)
			}
			fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
			c.Flags(fs)
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(text, "-"+f.Name) {
					t.Errorf("help %s lacks flag -%s", c.Name, f.Name)
				}
				if !flagNamed(doc, f.Name) {
					t.Errorf("%s does not document flag --%s of gosleuth %s", page, f.Name, c.Name)
				}
			})
		})
	}
}

// flagNamed reports whether markdown text names the flag, as -name or
// --name, not as the start of a longer flag (--pid is not --pid-a).
func flagNamed(text []byte, name string) bool {
	re := regexp.MustCompile(`(^|[^-\w])--?` + regexp.QuoteMeta(name) + `($|[^-\w])`)
	return re.Match(text)
}

func TestFlagNamed(t *testing.T) {
	tests := []struct {
		text, name string
		want       bool
	}{
		{"| `--pid PID` | x |", "pid", true},
		{"`-o FILE`", "o", true},
		{"`--threads`, `-H`", "H", true},
		{"`--pid-a PID`", "pid", false},
		{"--proc-root", "proc", false},
		{"the process id", "pid", false},
		{"`--format=json`", "format", true},
	}
	for _, tt := range tests {
		if got := flagNamed([]byte(tt.text), tt.name); got != tt.want {
			t.Errorf("flagNamed(%q, %q) = %v, want %v", tt.text, tt.name, got, tt.want)
		}
	}
}

// outside are the marks of a reference to documents kept outside the
// repository: the design sketch, studies, reviews and case summaries. The
// design lives in docs/design.md (lower case, so it does not match). A
// relative path to anything else outside is caught by relPaths.
var outside = []string{"DESIGN.md", "-study.md", "code-review-", "CASES.md"}

// relPath is a path that climbs with "../" in a comment or page: at the
// start of a word, so that an elided path (".../debug/pprof") is not one.
var relPath = regexp.MustCompile(`(?:^|[\s("'\x60\[])((?:\.\./)+[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*)`)

// relPaths returns the "../" paths in text that, taken from dir (the
// folder of the file that holds them), lead nowhere in the repository: out
// of it, or to nothing there.
func relPaths(dir, text string) []string {
	var out []string
	for _, m := range relPath.FindAllStringSubmatch(text, -1) {
		p := strings.TrimRight(m[1], ".")
		target := filepath.Join(dir, p)
		if r := rel(target); r == ".." || strings.HasPrefix(r, "../") {
			out = append(out, p)
		} else if _, err := os.Stat(target); err != nil {
			out = append(out, p)
		}
	}
	return out
}

// TestDocsStayInRepo fails when the README, a page under docs/ or a Go
// comment anywhere in the tree points outside the repository, and when a
// relative markdown link of the README or docs/ leads nowhere.
func TestDocsStayInRepo(t *testing.T) {
	var mds, gos []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		switch {
		case d.IsDir():
		case strings.HasSuffix(path, ".go"):
			gos = append(gos, path)
		case strings.HasSuffix(path, ".md"):
			mds = append(mds, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(gos) < 100 {
		t.Fatalf("found %d Go files under %s: not the repository", len(gos), repoRoot)
	}
	for _, path := range gos {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range goComments(src) {
			for _, mark := range outside {
				if strings.Contains(c.text, mark) {
					t.Errorf("%s:%d: a comment points outside the repository (%q): point to docs/ instead", rel(path), c.line, mark)
				}
			}
			for _, p := range relPaths(filepath.Dir(path), c.text) {
				t.Errorf("%s:%d: a comment names %s, which leads nowhere in the repository: point to docs/ instead", rel(path), c.line, p)
			}
		}
	}
	var pages []string
	for _, path := range mds {
		if r := rel(path); r == "README.md" || strings.HasPrefix(r, "docs/") {
			pages = append(pages, path)
		}
	}
	if len(pages) < 14 {
		t.Fatalf("found %d pages (README.md, docs/*.md), want at least 14", len(pages))
	}
	for _, path := range pages {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, mark := range outside {
				if strings.Contains(line, mark) {
					t.Errorf("%s:%d: points outside the repository (%q)", rel(path), i+1, mark)
				}
			}
			for _, p := range relPaths(filepath.Dir(path), line) {
				t.Errorf("%s:%d: names %s, which leads nowhere in the repository", rel(path), i+1, p)
			}
		}
		for _, l := range mdLinks(text) {
			target := filepath.Join(filepath.Dir(path), l.target)
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d: link to %s leads nowhere: %v", rel(path), l.line, l.target, err)
			} else if r := rel(target); r == ".." || strings.HasPrefix(r, "../") {
				t.Errorf("%s:%d: link to %s leaves the repository", rel(path), l.line, l.target)
			}
		}
	}
}

// TestDesignNamesEveryPackage keeps docs/design.md's package list whole:
// every package under internal/ is named there, with its path.
func TestDesignNamesEveryPackage(t *testing.T) {
	design, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(filepath.Join(repoRoot, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				n++
				if pkg := rel(path); !strings.Contains(string(design), "`"+pkg+"`") {
					t.Errorf("docs/design.md does not name package %s: say what it does and where it sits", pkg)
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found %d packages under internal/: not the repository", n)
	}
}

// dated finds a calendar date: dated campaigns belong in bench/*/RESULTS.
var dated = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`)

// TestREADMEStaysShort keeps the README a newcomer's page: at most 200
// lines, none over 300 characters, no dated measurement (those go to
// bench/*/RESULTS.txt, and the pages under docs/ link to them; the pages
// carry no dates either).
func TestREADMEStaysShort(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	if len(lines) > 200 {
		t.Errorf("README.md has %d lines, want at most 200: move reference text to docs/", len(lines))
	}
	for i, line := range lines {
		if n := len([]rune(line)); n > 300 {
			t.Errorf("README.md:%d: %d characters, want at most 300", i+1, n)
		}
	}
	pages, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	for _, path := range append(pages, filepath.Join(repoRoot, "README.md")) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			if d := dated.FindString(line); d != "" {
				t.Errorf("%s:%d: dated line (%s): dated measurements belong in bench/*/RESULTS.txt", rel(path), i+1, d)
			}
		}
	}
}

// TestREADMETestCommand holds the README's test command to the one .ci/run
// runs (which adds -v and sends the output to a log).
func TestREADMETestCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "go test ") && strings.HasSuffix(line, " ./...") {
			want = line
			break
		}
	}
	if want == "" {
		t.Fatal("README.md shows no 'go test ... ./...' command")
	}
	for _, line := range strings.Split(string(ci), "\n") {
		cmd, _, _ := strings.Cut(line, ">")
		var fields []string
		for _, f := range strings.Fields(cmd) {
			if f != "-v" {
				fields = append(fields, f)
			}
		}
		if strings.Join(fields, " ") == want {
			return
		}
	}
	t.Errorf("README.md's test command %q is not the one .ci/run runs", want)
}

// comment is one Go comment and the line it starts on.
type comment struct {
	text string
	line int
}

// goComments returns the comments of a Go source file. A file that does
// not scan cleanly still gives the comments found.
func goComments(src []byte) []comment {
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, src, func(token.Position, string) {}, scanner.ScanComments)
	var out []comment
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.COMMENT {
			out = append(out, comment{lit, fset.Position(pos).Line})
		}
	}
}

// link is a relative link of a markdown page, without its #fragment.
type link struct {
	target string
	line   int
}

// mdLinkRE matches an inline markdown link or image: [text](target).
var mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdLinks returns the relative links of a markdown page, outside code
// blocks: not URLs with a scheme, not links within the page.
func mdLinks(text []byte) []link {
	var out []link
	fenced := false
	for i, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, link{target, i + 1})
		}
	}
	return out
}

func TestMDLinks(t *testing.T) {
	page := "see [cli](cli.md#exit-status) and ![shot](process.png)\n" +
		"```\n[not](a-link.md)\n```\n" +
		"[web](https://example.com/x) [here](#flags) [up](../README.md)\n"
	var got []string
	for _, l := range mdLinks([]byte(page)) {
		got = append(got, l.target)
	}
	want := []string{"cli.md", "process.png", "../README.md"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links %q, want %q", got, want)
	}
}

// rel is path relative to the repository root, with forward slashes.
func rel(path string) string {
	r, err := filepath.Rel(repoRoot, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// TestRelPaths: a "../" path that leaves the repository or leads to
// nothing is caught, one that resolves inside it is not, nor an elided
// path.
func TestRelPaths(t *testing.T) {
	docs := filepath.Join(repoRoot, "docs")
	// The paths out of the repository are put together here, so that this
	// file does not itself name one.
	up := func(n int) string { return strings.Repeat(".."+"/", n) + "notes/plan.md" }
	for _, tc := range []struct {
		dir, text string
		want      []string
	}{
		{repoRoot, "the plan is in " + up(1) + ".", []string{up(1)}},
		{filepath.Join(repoRoot, "internal", "window"), "see (" + up(3) + ")", []string{up(3)}},
		{filepath.Join(repoRoot, "internal", "window"), "see ../doctor/missing.go", []string{"../doctor/missing.go"}},
		{docs, "back to [the README](../README.md)", nil},
		{filepath.Join(repoRoot, "internal", "window"), "served at .../debug/pprof and /sys/.../schedstat", nil},
	} {
		if got := relPaths(tc.dir, tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("relPaths(%s, %q) = %q, want %q", rel(tc.dir), tc.text, got, tc.want)
		}
	}
}
