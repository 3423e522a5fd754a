package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at link time with -ldflags "-X main.version=v1.2.3"; when it
// is empty the module version or VCS revision from the build info is used.
var version string

func versionString() string {
	v := version
	var rev, dirty string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " (" + rev + dirty + ")"
	}
	return fmt.Sprintf("gosleuth %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func init() {
	register(&command{
		Name:  "version",
		Usage: "version",
		Short: "print gosleuth's version and the Go it was built with",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string, io.Writer, io.Writer) error {
			return func(_ context.Context, args []string, stdout, _ io.Writer) error {
				if len(args) > 0 {
					return usagef("version takes no arguments")
				}
				_, err := fmt.Fprintln(stdout, versionString())
				return err
			}
		},
	})
}
