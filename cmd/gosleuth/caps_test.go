package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestMissingCapsNote(t *testing.T) {
	all := func(int) bool { return true }
	only := func(caps ...int) func(int) bool {
		return func(c int) bool {
			for _, x := range caps {
				if x == c {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name    string
		command string
		euid    int
		has     func(int) bool
		tracefs bool
		want    []string // substrings; none: no note
	}{
		{"root with every capability", "doctor", 0, all, false, nil},
		{"not root: the sources say so", "doctor", 1000, only(), false, nil},
		{"no ptrace", "top", 0, only(capDACReadSearch, capPerfmon, capBPF), true, []string{"CAP_SYS_PTRACE (Go versions"}},
		{"top needs no perfmon", "top", 0, only(capSysPtrace, capDACReadSearch), true, nil},
		{"sys_admin covers perfmon and bpf", "profile", 0, only(capSysAdmin), true, nil},
		{"profile without perfmon", "profile", 0, only(capSysPtrace, capBPF), true, []string{"CAP_PERFMON (kernel stacks"}},
		{"tracefs unmounted, no sys_admin", "syscalls", 0, only(capPerfmon, capBPF), false, []string{"CAP_SYS_ADMIN or the host's /sys/kernel/tracing"}},
		{"tracefs mounted in", "syscalls", 0, only(capPerfmon, capBPF), true, nil},
		{"nothing at all", "exporter", 0, only(), false, []string{"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_PERFMON", "CAP_BPF", "CAP_SYS_ADMIN"}},
		{"a command with no sources", "version", 0, only(), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := missingCapsNote(tc.command, tc.euid, tc.has, tc.tracefs)
			if len(tc.want) == 0 && got != "" {
				t.Errorf("note %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("note %q lacks %q", got, w)
				}
			}
			if strings.Contains(got, "\n") {
				t.Errorf("note %q is more than one line", got)
			}
		})
	}
}

// TestCapsMatchDocs keeps capNeeds and the table of docs/containers.md
// (whose rows the deploy tests prove in containers) in agreement: each
// command's capabilities in the table are those capNeeds names it for.
func TestCapsMatchDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for l := range strings.Lines(string(b)) {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		cmd := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var doc []string
		for _, c := range strings.Split(cells[2], ",") {
			doc = append(doc, "CAP_"+strings.TrimSpace(c))
		}
		var code []string
		for _, n := range capNeeds {
			if contains(n.commands, cmd) {
				code = append(code, n.name)
			}
		}
		slices.Sort(doc)
		slices.Sort(code)
		if !slices.Equal(doc, code) {
			t.Errorf("%s: docs/containers.md says %v, capNeeds %v", cmd, doc, code)
		}
		rows++
	}
	if rows < 8 {
		t.Errorf("%d command rows in docs/containers.md's table", rows)
	}
}

// TestTopDeniedNote: top never tells root to run as root; it names the
// capability root lacks, or says the processes are beyond its reach.
func TestTopDeniedNote(t *testing.T) {
	all := func(int) bool { return true }
	noPtrace := func(c int) bool { return c != capSysPtrace }
	for _, tc := range []struct {
		name string
		euid int
		has  func(int) bool
		want string // "" for top's own note
	}{
		{"not root: top's own note", 1000, all, ""},
		{"root without ptrace", 0, noPtrace, "without CAP_SYS_PTRACE"},
		{"root with everything", 0, all, "outside gosleuth's user namespace"},
	} {
		got := topDeniedNote(tc.euid, tc.has)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) || strings.Contains(got, "run as root") {
			t.Errorf("%s: note %q, want one with %q and never 'run as root'", tc.name, got, tc.want)
		}
	}
}
