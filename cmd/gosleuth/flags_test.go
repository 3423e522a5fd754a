package main

import (
	"flag"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// commandFlags declares command c's flags on a new set.
func commandFlags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

// TestFlagPlaceholders: the backquoted word of each flag's usage is what
// "gosleuth help" prints after the flag, so it must name the value: a
// duration flag reads -name duration (or window, interval...), never
// "-rate second", "-max-lag this" or "-doctor-every often".
func TestFlagPlaceholders(t *testing.T) {
	durations := []string{"duration", "window", "length", "interval", "period", "timeout"}
	notNouns := []string{"this", "that", "long", "often", "second", "time", "auto", "memory", "how", "when"}
	for _, c := range commands {
		commandFlags(c).VisitAll(func(f *flag.Flag) {
			name, _ := flag.UnquoteUsage(f)
			isDur := false
			if g, ok := f.Value.(flag.Getter); ok {
				_, isDur = g.Get().(time.Duration)
			}
			if isDur && !slices.Contains(durations, name) {
				t.Errorf("%s -%s %s: a duration's placeholder is one of %v", c.Name, f.Name, name, durations)
			}
			if slices.Contains(notNouns, name) {
				t.Errorf("%s -%s %s: the placeholder does not name the value", c.Name, f.Name, name)
			}
		})
	}
}

// flagRef finds a flag named in prose: --name, or -name after a space,
// backquote or bracket.
var flagRef = regexp.MustCompile("(?:^|[\\s`(\\[|,\"'])(--?)([a-zA-Z][\\w-]*)")

// otherTools are flags of other programs that help texts name (strace -c).
var otherTools = []string{"c"}

// TestNamedFlagsExist: every flag a command's usage, help or page under
// docs/ names is one of its flags, every --flag the README names is some
// command's, and every --flag in a message of the code (a string literal
// outside tests) is some command's: a hint never names a flag that does
// not exist (load once said "give --pprof or --metrics").
func TestNamedFlagsExist(t *testing.T) {
	known := map[string]bool{"help": true, "version": true}
	for _, c := range commands {
		fs := commandFlags(c)
		fs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
		text := c.Usage + "\n" + c.Short + "\n" + c.Long
		fs.VisitAll(func(f *flag.Flag) { text += "\n" + f.Usage })
		for _, m := range flagRef.FindAllStringSubmatch(text, -1) {
			if fs.Lookup(m[2]) == nil && !slices.Contains(otherTools, m[2]) {
				t.Errorf("help of %s names %s%s, which it does not take", c.Name, m[1], m[2])
			}
		}
		doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", c.Name+".md"))
		if err != nil {
			continue // help and version are documented in docs/cli.md
		}
		for _, m := range flagRef.FindAllStringSubmatch(string(doc), -1) {
			if m[1] == "--" && fs.Lookup(m[2]) == nil {
				t.Errorf("docs/%s.md names --%s, which %s does not take", c.Name, m[2], c.Name)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range flagRef.FindAllStringSubmatch(string(readme), -1) {
		if m[1] == "--" && !known[m[2]] {
			t.Errorf("README.md names --%s, which no command takes", m[2])
		}
	}
	for _, dir := range []string{"cmd", "internal"} {
		filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if filepath.Ext(p) != ".go" || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			var sc scanner.Scanner
			fset := token.NewFileSet()
			sc.Init(fset.AddFile(p, -1, len(b)), b, nil, 0)
			for {
				pos, tok, lit := sc.Scan()
				if tok == token.EOF {
					break
				}
				for _, m := range flagRef.FindAllStringSubmatch(lit, -1) {
					if tok == token.STRING && m[1] == "--" && !known[m[2]] {
						t.Errorf("%s: a message names --%s, which no command takes", rel(fset.Position(pos).String()), m[2])
					}
				}
			}
			return nil
		})
	}
}
