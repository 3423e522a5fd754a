package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpExamples holds one example command line for each command, shown by
// "gosleuth help NAME" below the flags. TestHelpEveryCommand fails when a
// command has none.
var helpExamples = map[string]string{
	"doctor":   "sudo gosleuth doctor --pid 4711 --duration 20s --format markdown -o report.md",
	"top":      "gosleuth top --pid 4711 --once --format json",
	"syscalls": "sudo gosleuth syscalls --pid 4711 --duration 5s",
	"profile":  "sudo gosleuth profile --pid 4711 --duration 10s -o cpu.pb.gz --flame cpu.html",
	"probe":    "sudo gosleuth probe --pid 4711 --recipe timers,locks",
	"inspect":  "gosleuth inspect --pid 4711 --duration 5s",
	"exporter": "gosleuth exporter --listen :9467",
	"web":      "gosleuth web --pid 4711            # then open http://127.0.0.1:9468/",
	"load":     "gosleuth load http://127.0.0.1:8080/ --rate 1000 --step +1000/30s --sla 'p99<=15ms' --duration 10m",
	"compare":  "gosleuth compare --load http://127.0.0.1:8080/ --rate 1000 './srv-old' './srv-new'",
	"help":     "gosleuth help doctor",
	"version":  "gosleuth version",
}

// docPage is the page under docs/ that documents command c: docs/NAME.md,
// or the CLI contract's page for the commands about gosleuth itself.
func docPage(c *command) string {
	switch c.Name {
	case "help", "version":
		return "docs/cli.md"
	}
	return "docs/" + c.Name + ".md"
}

// printCommandHelp writes what "gosleuth help NAME" and "gosleuth NAME
// --help" show: the synopsis, the command's text, its flags as fs declares
// them, one example and the page that documents it.
func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: gosleuth %s\n\n", c.Usage)
	if c.Long != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(c.Long))
	}
	var n int
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "Flags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fmt.Fprintln(w)
	}
	if ex := helpExamples[c.Name]; ex != "" {
		fmt.Fprintf(w, "Example:\n  %s\n\n", ex)
	}
	fmt.Fprintf(w, "Documentation: %s in gosleuth's source tree.\n", docPage(c))
}
