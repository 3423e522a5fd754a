package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gosleuth/gosleuth/internal/goruntime"
)

// command is one gosleuth subcommand. Each lives in a file of its own and
// registers itself in commands.
type command struct {
	// Name is the word after "gosleuth".
	Name string
	// Usage is the synopsis, without the leading "gosleuth".
	Usage string
	// Short is the one-line summary shown by "gosleuth help".
	Short string
	// Long is the text shown by "gosleuth help NAME" above the flags.
	Long string
	// Flags declares the command's flags on fs and returns the function that
	// runs it once they are parsed.
	Flags func(fs *flag.FlagSet) func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// usageError marks a bad command line: main exits 2 for it, after one line
// and, when cmd is set, a pointer to the command's help.
type usageError struct {
	err error
	cmd string
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

// checkFailed marks a run that worked but whose check failed (a finding at
// or above doctor --fail-on, an SLA that load did not meet): main exits 3,
// so a deploy gate can tell it from a failure to run (1) and bad usage (2).
type checkFailed struct{ msg string }

func (c checkFailed) Error() string { return c.msg }

// commands is the table "gosleuth NAME" dispatches on, in help order.
var commands []*command

func register(c *command) { commands = append(commands, c) }

func lookup(name string) *command {
	for _, c := range commands {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// run is the whole program behind main, so tests can drive it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usagef("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return nil
	case "-v", "-version", "--version":
		_, err := fmt.Fprintln(stdout, versionString())
		return err
	}
	c := lookup(name)
	if c == nil {
		return usagef("unknown command %q: run 'gosleuth help' for the list", name)
	}
	fs := flag.NewFlagSet("gosleuth "+c.Name, flag.ContinueOnError)
	// The flag package's own messages are dropped: a bad flag is reported
	// once, in one line, with a pointer to the help (exitCode).
	fs.SetOutput(io.Discard)
	runFn := c.Flags(fs)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(stdout, c, fs)
			return nil
		}
		return usageError{err: durationHint(fs, err), cmd: c.Name}
	}
	if note := capsNote(c.Name); note != "" {
		fmt.Fprintln(stderr, "gosleuth: note: "+note)
	}
	err := runFn(ctx, fs.Args(), stdout, stderr)
	var u usageError
	// help's own errors point to "gosleuth help" already.
	if errors.As(err, &u) && u.cmd == "" && c.Name != "help" {
		u.cmd = c.Name
		return u
	}
	return err
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "gosleuth: performance diagnosis for Go programs on Linux, from outside the process.\n\n")
	fmt.Fprintf(w, "Usage:\n  gosleuth COMMAND [flags] [args]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Short)
	}
	fmt.Fprint(w, contract)
	fmt.Fprintf(w, "\nRun 'gosleuth help COMMAND' for a command's flags, an example and its page\nunder docs/; the contract above is docs/cli.md.\n")
}

// contract is the one CLI contract every command follows (docs/cli.md
// says the same at length).
const contract = `
Every command:
  --pid PID     the target (a comma list where several make sense); a PID
                that does not exist: "gosleuth: process N not found", exit 1
  --proc ROOT   read another procfs mount (a container watching its host)
  --duration D  a Go duration everywhere (500ms, 10s, 2m)
  --format F    text or json (doctor adds markdown)
  -o FILE       the main output, written completely or not at all (- is
                stdout); a device, FIFO or symlink is written through,
                never replaced
  --pprof-url, --metrics-url   the target's runtime endpoints
  exit status   0 ok, 1 failure, 2 bad usage, 3 the check failed
                (doctor --fail-on, load --sla)
`

// help is registered here, first, so that it leads the list of commands.
func init() {
	register(&command{
		Name:  "help",
		Usage: "help [COMMAND]",
		Short: "show the commands, or one command's flags, an example and its page",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			return func(_ context.Context, args []string, stdout, _ io.Writer) error {
				switch len(args) {
				case 0:
					printUsage(stdout)
					return nil
				case 1:
					c := lookup(args[0])
					if c == nil {
						return usagef("unknown command %q: run 'gosleuth help' for the list", args[0])
					}
					cfs := flag.NewFlagSet("gosleuth "+c.Name, flag.ContinueOnError)
					c.Flags(cfs)
					printCommandHelp(stdout, c, cfs)
					return nil
				default:
					return usagef("help takes at most one command name")
				}
			}
		},
	})
}

// checkURLs checks the --pprof-url and --metrics-url given (empty ones are
// not given): a malformed one is a usage error before any work starts.
func checkURLs(pprofURL, metricsURL string) error {
	for _, u := range []struct{ kind, raw string }{{"pprof", pprofURL}, {"metrics", metricsURL}} {
		if u.raw == "" {
			continue
		}
		if _, err := goruntime.CheckURL(u.kind, u.raw); err != nil {
			return usagef("%v", err)
		}
	}
	return nil
}

// badValue matches the flag package's error for a value it could not parse.
var badValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([\w-]+): `)

// durationHint adds the accepted form to the flag package's error for a
// duration without its unit (--duration 5): "parse error" alone does not
// say that 5s was meant; and for a list given to a flag of one PID.
func durationHint(fs *flag.FlagSet, err error) error {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	f := fs.Lookup(m[2])
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	if _, isInt := g.Get().(int); isInt && strings.HasPrefix(f.Name, "pid") {
		return fmt.Errorf("%w: --%s takes one PID", err, f.Name)
	}
	if _, ok := g.Get().(time.Duration); !ok {
		return err
	}
	if _, perr := strconv.ParseFloat(m[1], 64); perr == nil {
		return fmt.Errorf("%w: a duration needs its unit (%ss, %sms, %sm)", err, m[1], m[1], m[1])
	}
	return fmt.Errorf("%w: want a duration such as 500ms, 10s or 2m", err)
}

// fractionFlag is a flag that holds a fraction, given as one (0.02) or as
// a percentage (2%).
type fractionFlag struct{ v *float64 }

func (f fractionFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatFloat(*f.v, 'g', -1, 64)
}

func (f fractionFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	pct, isPct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(pct, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("want a fraction such as 0.02 or a percentage such as 2%%")
	}
	if isPct {
		v /= 100
	}
	*f.v = v
	return nil
}

// oneP runs the command's goroutines on one P unless GOMAXPROCS is set:
// its loops wait far more than they compute, and more Ps only add threads
// woken to run a goroutine another thread could have run, each wake-up a
// thread switch (tens of microseconds on a virtual machine), which
// gosleuth must not show the waste it looks for. The command sets it, not
// the library: tests and other callers keep theirs.
func oneP() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
