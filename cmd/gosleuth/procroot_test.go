package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gosleuth/gosleuth/internal/testenv"
)

// outsideRootAllowed are the /proc and /sys paths gosleuth may open under
// --proc ROOT, because they are not any watched process's state:
// gosleuth's own descriptors, the kernel's symbol table, and the kernel
// interfaces perf and the tracepoints are opened through.
var outsideRootAllowed = []string{
	"/proc/self/",
	"/proc/kallsyms",
	"/sys/kernel/tracing",
	"/sys/kernel/debug/tracing",
	"/sys/bus/event_source/",
}

// copyStartupReads are what a copy of gosleuth that it starts (a
// releaser, a guard) reads as its Go runtime starts: the huge page size
// and its own cgroup's CPU limit, no watched process's state.
var copyStartupReads = []string{
	"/sys/kernel/mm/transparent_hugepage/",
	"/sys/fs/cgroup/",
}

var tracedPath = regexp.MustCompile(`"((?:/proc|/sys)(?:/[^"]*)?)"`)

// TestDoctorReadsOnlyItsProcRoot runs doctor --proc ROOT, with close looks,
// over a fixture tree under strace: once gosleuth has started (its first
// access to ROOT), every /proc or /sys path it touches is under ROOT, one
// of outsideRootAllowed or gosleuth's own /proc/PID/, or, in a copy of
// gosleuth it starts, one of copyStartupReads. The host's CPU count comes from ROOT/stat too
// (the fixture says 3, this machine has its own).
func TestDoctorReadsOnlyItsProcRoot(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Root, testenv.Strace)
	root := filepath.Join(t.TempDir(), "proc")
	if out, err := exec.Command("cp", "-a", "../../internal/proc/testdata/proc", root).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture: %v: %s", err, out)
	}
	stat := "cpu  300 0 300 3000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\ncpu1 100 0 100 1000 0 0 0 0 0 0\ncpu2 100 0 100 1000 0 0 0 0 0 0\nbtime 1700000000\n"
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command("strace", "-f", "-qq", "-o", trace,
		"-e", "trace=execve,open,openat,openat2,readlink,readlinkat,stat,lstat,newfstatat,statx,access,faccessat,faccessat2,getdents64",
		os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOSLEUTH_CLI_ARGS="+strings.Join([]string{
		"doctor", "--proc", root, "--pid", "8279,8284", "--duration", "2s", "--format", "json"}, "\n"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doctor --proc %s: %v\n%s", root, err, out)
	}
	var rep struct {
		Host struct {
			CPUs int `json:"cpus"`
		} `json:"host"`
		Processes []struct {
			PID  int    `json:"pid"`
			Comm string `json:"comm"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Host.CPUs != 3 || len(rep.Processes) != 2 || rep.Processes[0].Comm != "a) b" {
		t.Errorf("report from the fixture: %d CPUs (want 3, from ROOT/stat), processes %+v", rep.Host.CPUs, rep.Processes)
	}

	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	started, inside := false, 0
	copies := map[string]bool{} // PIDs that exec'd after gosleuth started
	self := ""                  // gosleuth's PID: its /proc/PID/ is its own, as /proc/self/ is
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pid, _, _ := strings.Cut(line, " ")
		if strings.Contains(line, "execve(") {
			if self == "" {
				self = pid
			}
			copies[pid] = started
			continue // the command line names ROOT
		}
		if !started {
			started = strings.Contains(line, `"`+root)
			continue
		}
		for _, m := range tracedPath.FindAllStringSubmatch(line, -1) {
			p := m[1]
			ok := false
			for _, a := range outsideRootAllowed {
				ok = ok || strings.HasPrefix(p, a) || p == strings.TrimSuffix(a, "/")
			}
			ok = ok || self != "" && strings.HasPrefix(p, "/proc/"+self+"/")
			for _, a := range copyStartupReads {
				ok = ok || copies[pid] && strings.HasPrefix(p, a)
			}
			if !ok {
				t.Errorf("read outside --proc %s: %s", root, line)
			}
		}
		if strings.Contains(line, `"`+root+"/") {
			inside++
		}
	}
	if !started || inside < 20 {
		t.Fatalf("the trace shows %d accesses under %s (started %v): did strace follow gosleuth?", inside, root, started)
	}
	t.Logf("%d accesses under ROOT", inside)
}
