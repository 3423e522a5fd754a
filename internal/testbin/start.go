package testbin

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Options says when a program Start runs is ready and how it is stopped.
type Options struct {
	// Ready reports whether a line the program printed says it is ready;
	// nil takes its first line.
	Ready func(line string) bool
	// Wait is how long it may take to be ready: 30 s when 0.
	Wait time.Duration
	// Lines keeps what it prints after the ready line for Next and Ask;
	// without it the rest of its output is read and dropped, so it never
	// blocks on a full pipe.
	Lines bool
	// Stderr reads the ready line and later lines from its standard error
	// (a program that logs there), leaving its standard output as cmd
	// says.
	Stderr bool
	// Stop is sent to the program when the test ends, and it is killed if
	// it has not exited 10 s later; nil kills it at once.
	Stop os.Signal
}

// Proc is a test program started by Start (its exec.Cmd's fields, such as
// Process, are its own).
type Proc struct {
	*exec.Cmd
	// Head holds the lines it printed up to the one that said it was
	// ready, that line last.
	Head  []string
	lines chan string
}

// Start starts cmd with its standard output read by the test (its standard
// error is the test's unless cmd says otherwise, or Options.Stderr), waits
// until it says it is ready, and stops it when the test ends. A program
// that fails to start, ends or stays silent fails the test.
func Start(t testing.TB, cmd *exec.Cmd, opts Options) *Proc {
	t.Helper()
	pipe := cmd.StdoutPipe
	if opts.Stderr {
		pipe = cmd.StderrPipe
	} else if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	out, err := pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() { stop(cmd, opts.Stop) })
	p := &Proc{Cmd: cmd, lines: make(chan string, 64)}
	head := make(chan string, 1)
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		ready := false
		for sc.Scan() {
			switch l := sc.Text(); {
			case !ready:
				head <- l
				ready = opts.Ready == nil || opts.Ready(l)
			case opts.Lines:
				p.lines <- l
			}
			if ready && !opts.Lines {
				break
			}
		}
		close(head)
		io.Copy(io.Discard, out)
	}()
	wait := opts.Wait
	if wait == 0 {
		wait = 30 * time.Second
	}
	deadline := time.After(wait)
	for {
		select {
		case l, ok := <-head:
			if !ok {
				t.Fatalf("%s ended before it was ready (it printed %q)", cmd.Path, p.Head)
			}
			p.Head = append(p.Head, l)
			if opts.Ready == nil || opts.Ready(l) {
				return p
			}
		case <-deadline:
			t.Fatalf("%s not ready after %v (it printed %q)", cmd.Path, wait, p.Head)
		}
	}
}

// stop ends cmd: sig first, when given, then SIGKILL after 10 s.
func stop(cmd *exec.Cmd, sig os.Signal) {
	if sig == nil {
		cmd.Process.Kill()
		cmd.Wait()
		return
	}
	cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// PID is the program's process ID.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Ready is the line that said the program was ready.
func (p *Proc) Ready() string { return p.Head[len(p.Head)-1] }

// Next returns the next line the program printed after its ready line
// (Options.Lines), failing the test when none comes within wait.
func (p *Proc) Next(t testing.TB, wait time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s ended", p.Cmd.Path)
		}
		return l
	case <-time.After(wait):
		t.Fatalf("no line from %s after %v", p.Cmd.Path, wait)
	}
	return ""
}

// Ask sends the program sig and returns the line it answers with, for
// programs that report on a signal.
func (p *Proc) Ask(t testing.TB, sig os.Signal, wait time.Duration) string {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return p.Next(t, wait)
}

// AskJSON is Ask for a program that answers with prefix and a JSON value:
// it decodes the value into v, failing the test on any other answer.
func (p *Proc) AskJSON(t testing.TB, sig os.Signal, prefix string, v any, wait time.Duration) {
	t.Helper()
	l := p.Ask(t, sig, wait)
	rest, ok := strings.CutPrefix(l, prefix)
	if !ok {
		t.Fatalf("%s answered %q, want %q and JSON", p.Cmd.Path, l, prefix)
	}
	if err := json.Unmarshal([]byte(rest), v); err != nil {
		t.Fatalf("%s answered %q: %v", p.Cmd.Path, l, err)
	}
}

// Fetch returns the body a test program serves at url (its pprof or
// metrics endpoint), failing the test on an error or a status other than
// 200.
func Fetch(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}
