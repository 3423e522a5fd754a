package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// goldenReport is a report from windows built in the test: a 1 ms ticker
// in a podman container (warn, with syscall evidence), a process with an escape sequence in its
// name, and an exited one, over a fixed host.
func goldenReport() *Report {
	ticker := win(10, func(w *Window) {
		w.PID, w.Comm = 4242, "ticker"
		c, _ := proc.ParseContainer("/libpod_parent/libpod-ed94a9f30d54ddbceffbcd03163966df878a2887f82ffc9cee52ff87dc668e1f")
		w.Container = &c
		w.VolCtxsw = 20000
		w.UserSec, w.SysSec = 0.06, 0.14
		w.IOCalls = 5
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 9500, "epoll_pwait": 4000, "nanosleep": 500}}
	})
	evil := win(10, func(w *Window) {
		w.PID, w.Comm = 4343, "evil\x1b[2J"
		w.UserSec, w.SysSec = 0.9, 0.1
	})
	gone := win(10, func(w *Window) {
		w.PID, w.Comm, w.Exited = 4444, "gone", true
	})
	// Eight goroutines on one mutex: the lock is the cause, and the
	// wake-ups and kernel time are its symptoms, not a timer loop.
	locked := win(10, func(w *Window) {
		w.PID, w.Comm = 4545, "locked"
		w.VolCtxsw = 150000
		w.UserSec, w.SysSec = 1.5, 3
		w.IOCalls = 5
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 195000, "nanosleep": 20000}}
		w.Stacks = &Stacks{Samples: 400, KernelShare: 0.6,
			Classes:     map[string]float64{ClassUserCode: 0.1, ClassLock: 0.08, ClassScheduler: 0.05},
			KernelPaths: []Share{{Name: "syscall futex", Share: 0.5}, {Name: "syscall nanosleep", Share: 0.1}},
			Sites: map[string][]Site{ClassLock: {
				{Func: "main.(*cache).get", File: "/src/app/cache.go", Line: 41, Share: 0.06},
				{Func: "main.(*cache).put", File: "/src/app/cache.go", Line: 57, Share: 0.02},
			}},
		}
	})
	t0 := time.Unix(1000, 0)
	h := &Host{CPUs: 2, Procs: 312, Tasks: 900, Start: t0, End: t0.Add(10 * time.Second), Root: true}
	return Diagnose([]*Window{ticker, evil, gone, locked}, h, []string{"tracefs mounted by gosleuth"}, true)
}

// TestHeaderCounts: with PIDs named (all) the header counts the processes
// watched and their threads, not the host's; on the whole host, the host's.
func TestHeaderCounts(t *testing.T) {
	named := goldenReport()
	if named.Host.Processes != 4 || named.Host.Threads != 24 {
		t.Errorf("PIDs named: header counts %d processes, %d threads; want the 4 watched and their 24 threads", named.Host.Processes, named.Host.Threads)
	}
	h := &Host{CPUs: 2, Procs: 312, Tasks: 900}
	host := Diagnose([]*Window{win(10, func(w *Window) { w.PID = 7 })}, h, nil, false)
	if host.Host.Processes != 312 || host.Host.Threads != 900 {
		t.Errorf("whole host: header counts %d processes, %d threads; want the host's 312 and 900", host.Host.Processes, host.Host.Threads)
	}
}

func TestReportGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(*Report, *bytes.Buffer) error
	}{
		{"report.txt", func(r *Report, b *bytes.Buffer) error { return r.WriteText(b, false) }},
		{"report-colour.txt", func(r *Report, b *bytes.Buffer) error { return r.WriteText(b, true) }},
		{"report.md", func(r *Report, b *bytes.Buffer) error { return r.WriteMarkdown(b) }},
		{"report.json", func(r *Report, b *bytes.Buffer) error { return r.WriteJSON(b) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.write(goldenReport(), &b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, b.Bytes())
		})
	}
}

// TestReportAlike: processes whose findings read alike (a host's forking
// shells) are written as one block (one section in markdown) and a line
// naming the others; a process whose finding names code, or with another
// severity, keeps its own block, and the JSON report keeps every process.
func TestReportAlike(t *testing.T) {
	shell := func(pid int, cpu float64, sev Severity, code []CodeRef) ProcessReport {
		return ProcessReport{PID: pid, Comm: "sh", CPUPct: cpu, Sources: []Source{SourceProc}, Findings: []Finding{{
			ID: "exec-hot-path", Severity: sev, Title: fmt.Sprintf("starts at least %.1f child processes a second", cpu*3),
			Sources: []Source{SourceProc}, Confidence: "medium", Code: code}}}
	}
	r := &Report{Host: HostSummary{Processes: 60, CPUs: 2, DurationSeconds: 30}}
	for i, cpu := range []float64{0.6, 0.5, 0.5, 0.4, 0.45} {
		r.Processes = append(r.Processes, shell(1000+i, cpu, Warn, nil))
	}
	r.Processes = append(r.Processes, shell(2000, 0.3, Info, nil), shell(2001, 0.3, Warn, []CodeRef{{Func: "main.run", File: "run.go", Line: 7}}))
	for _, f := range []struct {
		name    string
		write   func(*bytes.Buffer) error
		finding string
		want    []string
		written string // a line that would write an alike shell in full
	}{
		{"text", func(b *bytes.Buffer) error { return r.WriteText(b, false) }, "exec-hot-path:", []string{
			"\n1000 sh ",
			"  and 4 more sh processes with the same findings (their figures differ; cpu 0.4-0.5% each; --format json lists each): pid 1001, 1002, 1003, 1004\n",
			"\n2000 sh ", "\n2001 sh ",
		}, "\n1001 sh "},
		{"markdown", func(b *bytes.Buffer) error { return r.WriteMarkdown(b) }, "`exec-hot-path`", []string{
			"\n## 1000 `sh`",
			"\nAnd 4 more sh processes with the same findings (their figures differ; cpu 0.4-0.5% each; --format json lists each): pid 1001, 1002, 1003, 1004.\n",
			"\n## 2000 `sh`", "\n## 2001 `sh`",
		}, "\n## 1001 `sh`"},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			t.Fatal(err)
		}
		text := b.String()
		if n := strings.Count(text, f.finding); n != 3 {
			t.Errorf("%s: %d finding blocks, want 3 (the first alike shell, the info one, the one with code):\n%s", f.name, n, text)
		}
		for _, want := range f.want {
			if !strings.Contains(text, want) {
				t.Errorf("%s: missing %q in:\n%s", f.name, want, text)
			}
		}
		if strings.Contains(text, f.written) {
			t.Errorf("%s: an alike shell written in full:\n%s", f.name, text)
		}
	}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct{ Processes []json.RawMessage }
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Processes) != 7 {
		t.Errorf("JSON: %d processes, %v; want all 7", len(back.Processes), err)
	}
}

func TestExitedNotes(t *testing.T) {
	exited := func(comms ...string) []*Window {
		var ws []*Window
		for i, c := range comms {
			ws = append(ws, &Window{PID: 100 + i, Comm: c, Exited: true})
		}
		return ws
	}
	many := strings.Split("sh sh sh sh true true true cat ls a b c", " ")
	for _, tc := range []struct {
		name string
		ws   []*Window
		want []string
	}{
		{"none", nil, []string{}},
		{"a few: one note each", exited("sh", "true"), []string{
			"pid 100 (sh) exited during the window; findings cover what was seen",
			"pid 101 (true) exited during the window; findings cover what was seen"}},
		{"four: counted by command", exited("sh", "true", "sh", "cat"), []string{
			"4 processes exited during the window (sh 2, cat 1, true 1); findings cover what was seen"}},
		{"many commands: the five most named", exited(many...), []string{
			"12 processes exited during the window (sh 4, true 3, a 1, b 1, c 1, 2 more commands); findings cover what was seen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := exitedNotes(tc.ws)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("exitedNotes = %q\nwant %q", got, tc.want)
			}
		})
	}
}
