// Command gosleuth diagnoses the performance of Go programs (and any other
// process) on Linux from outside: a live process monitor, syscall accounting,
// stack profiles and a doctor that says what to change.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gosleuth/gosleuth/internal/termsafe"
)

func main() {
	os.Exit(mainExit(os.Args[1:]))
}

// mainExit runs gosleuth with args until it ends or is interrupted (SIGINT,
// SIGTERM, or SIGHUP when the terminal that ran it closes), and returns
// the exit status. Each command then cleans up as on SIGINT: compare stops
// the servers it started, probe detaches. A SIGHUP ignored at start (nohup)
// stays ignored.
func mainExit(args []string) int {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	return exitCode(run(ctx, args, os.Stdout, os.Stderr), os.Stderr)
}

// exitCode prints err (escaped: errors quote paths and names that other
// users choose) the way every subcommand reports failure and maps it
// to the process exit status: 0 success, 2 usage error, 3 a check that
// failed (doctor --fail-on, load --sla), 1 anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "gosleuth: %s\n", termsafe.String(u.err.Error()))
		if u.cmd != "" {
			fmt.Fprintf(stderr, "run 'gosleuth help %s' for its flags\n", u.cmd)
		}
		return 2
	}
	var c checkFailed
	if errors.As(err, &c) {
		fmt.Fprintf(stderr, "gosleuth: %s\n", termsafe.String(err.Error()))
		return 3
	}
	fmt.Fprintf(stderr, "gosleuth: %s\n", termsafe.String(err.Error()))
	return 1
}
