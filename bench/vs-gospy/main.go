// Command vs-gospy reads the same programs with gospy
// (github.com/monsterxx03/gospy, which reads goroutines and Ps from a live
// process's memory through its DWARF) and with gosleuth's runtime reader,
// side by side, and sets both against what each program says of itself
// (its own goroutine dump, taken after both):
//
//   - the census patient of internal/gomem's tests (300 goroutines in chan
//     receive, 120 in sleep, 40 in select, 7 in sync.Mutex.Lock), built with
//     each -releases toolchain, with DWARF and stripped (-ldflags=-s -w);
//   - for each: whether each tool read it, and the goroutines each counts
//     in the four states the patient parks them in.
//
// gospy is not part of gosleuth: build it yourself and pass its path.
//
//	go run ./bench/vs-gospy -gospy /path/to/gospy [-releases go1.20.14,go1.23.12,go1.26.11,go1.27.4]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

var states = []string{"chan receive", "sleep", "select", "sync.Mutex.Lock"}

func main() {
	gospy := flag.String("gospy", "", "path of a gospy binary (required)")
	releases := flag.String("releases", "go1.20.14,go1.21.13,go1.22.12,go1.23.12,go1.24.13,go1.25.14,go1.26.11,go1.27.4", "toolchains to build the patient with, comma list")
	flag.Parse()
	if *gospy == "" {
		fmt.Fprintln(os.Stderr, "vs-gospy: -gospy PATH is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "vs-gospy-")
	check(err)
	defer os.RemoveAll(dir)
	gs := filepath.Join(dir, "gosleuth")
	run(".", nil, "go", "build", "-o", gs, "./cmd/gosleuth")
	src, err := os.ReadFile("internal/gomem/testdata/census/main.go")
	check(err)
	mod := filepath.Join(dir, "census")
	check(os.MkdirAll(mod, 0o755))
	check(os.WriteFile(filepath.Join(mod, "main.go"), src, 0o644))
	check(os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module census\n\ngo 1.20\n"), 0o644))
	fmt.Printf("%-20s %-9s | %-40s | %-40s | %s\n", "build", "", "gospy "+strings.Join(states, "/"), "gosleuth", "the program's own dump")
	for _, tc := range strings.Split(*releases, ",") {
		for _, stripped := range []bool{false, true} {
			exe := filepath.Join(mod, tc)
			args := []string{"build", "-o", exe}
			kind := "DWARF"
			if stripped {
				exe += "-s"
				args = []string{"build", "-ldflags=-s -w", "-o", exe}
				kind = "stripped"
			}
			run(mod, []string{"GOTOOLCHAIN=" + tc, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}, "go", append(args, ".")...)
			compare(*gospy, gs, exe, tc, kind)
		}
	}
}

func compare(gospy, gs, exe, tc, kind string) {
	cmd := exec.Command(exe)
	out, err := cmd.StdoutPipe()
	check(err)
	check(cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		fmt.Println(tc, kind, "patient did not start")
		return
	}
	addr := sc.Text()
	time.Sleep(500 * time.Millisecond)
	pid := fmt.Sprint(cmd.Process.Pid)

	spy := "failed"
	if b, err := exec.Command(gospy, "summary", "--pid", pid, "--json").Output(); err == nil {
		var d struct {
			Goroutines []struct {
				Status     string `json:"status"`
				WaitReason string `json:"wait_reason"`
			} `json:"goroutines"`
		}
		if json.Unmarshal(b, &d) == nil {
			m := map[string]int{}
			for _, g := range d.Goroutines {
				m[g.WaitReason]++
			}
			spy = counts(m)
		}
	} else if ee, ok := err.(*exec.ExitError); ok {
		spy = "failed: " + firstLine(string(ee.Stderr)+string(b))
	}

	ours := "failed"
	if b, err := exec.Command(gs, "inspect", "--pid", pid, "--duration", "100ms", "--format", "json").Output(); err == nil {
		var r struct {
			Books *struct {
				Census struct {
					ByState map[string]int `json:"by_state"`
				} `json:"census"`
			} `json:"runtime_books"`
		}
		if json.Unmarshal(b, &r) == nil && r.Books != nil {
			ours = counts(r.Books.Census.ByState)
		}
	}

	own := map[string]int{}
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=2")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		head := regexp.MustCompile(`(?m)^goroutine \d+ \[([^\],]+)`)
		for _, m := range head.FindAllStringSubmatch(string(b), -1) {
			own[m[1]]++
		}
	}
	fmt.Printf("%-20s %-9s | %-40s | %-40s | %s\n", tc, kind, spy, ours, counts(own))
}

// counts prints the patient's four states' counts.
func counts(m map[string]int) string {
	var parts []string
	for _, s := range states {
		parts = append(parts, fmt.Sprint(m[s]))
	}
	return strings.Join(parts, "/")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func run(dir string, env []string, name string, args ...string) {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	if out, err := c.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "vs-gospy: %s %v: %v\n%s", name, args, err, out)
		os.Exit(1)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "vs-gospy:", err)
		os.Exit(1)
	}
}
