//go:build linux

package top

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/units"
)

const fixtures = "../proc/testdata/proc"

// fixtureRates reads the fixture host twice and gives chosen CPU and
// wake-up rates to some processes.
func fixtureRates(t *testing.T) (*proc.Snapshot, *proc.Rates) {
	t.Helper()
	r, err := proc.NewReader(proc.Options{Root: fixtures})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	var a, b proc.Snapshot
	if err := r.Snapshot(&a); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	rates := new(proc.Rates)
	rates.Compute(&a, &b)
	set := map[int32][2]float64{1: {5, 100}, 8279: {50, 3}, 8284: {20, 2000}}
	for i := range rates.Procs {
		if v, ok := set[rates.Procs[i].Proc.PID]; ok {
			rates.Procs[i].UserPct = v[0]
			rates.Procs[i].VolPerSec = v[1]
		}
	}
	return &b, rates
}

func pidsOf(rows []Row) []int32 {
	var out []int32
	for _, r := range rows {
		out = append(out, r.id())
	}
	return out
}

func TestViewSortFilter(t *testing.T) {
	snap, rates := fixtureRates(t)
	tests := []struct {
		name string
		view View
		want string
	}{
		{"cpu", View{Sort: ColCPU}, "[8279 8284 1 8286]"},
		{"cpu reversed", View{Sort: ColCPU, Reverse: true}, "[8286 1 8284 8279]"},
		{"wake-ups", View{Sort: ColWake}, "[8284 1 8279 8286]"},
		{"pid", View{Sort: ColPID}, "[1 8279 8284 8286]"},
		{"kernel threads shown", View{Sort: ColPID, Kernel: true}, "[1 2 8279 8284 8286]"},
		{"filter by name with a parenthesis", View{Sort: ColPID, Filter: "a) b"}, "[8279]"},
		{"filter by pid", View{Sort: ColPID, Filter: "8286"}, "[8286]"},
		{"filter by command line, any case", View{Sort: ColPID, Filter: "FIRECRACKER"}, "[1]"},
		// 8284's parent is not in the fixtures: it is a root, and the
		// busier one, so it comes first with its child.
		{"tree", View{Sort: ColCPU, Tree: true}, "[8284 8286 1 8279]"},
		{"tree keeps ancestors of matches", View{Sort: ColPID, Tree: true, Filter: "8286"}, "[8284 8286]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pidsOf(tt.view.Rows(snap, rates))
			if fmt.Sprint(got) != tt.want {
				t.Errorf("rows = %v, want %s", got, tt.want)
			}
		})
	}
}

func TestViewTreeAndThreads(t *testing.T) {
	snap, rates := fixtureRates(t)
	v := View{Sort: ColPID, Tree: true, Threads: true}
	rows := v.Rows(snap, rates)
	// PID 1 has 11 threads: its row, then 10 thread rows (the leader is the
	// process row itself).
	if rows[0].id() != 1 || rows[0].Task != nil {
		t.Fatalf("first row %+v", rows[0])
	}
	n := 0
	for _, r := range rows[1:] {
		if r.Task == nil {
			break
		}
		if r.Proc.PID != 1 || !strings.Contains(v.text(r, ColCommand), "┊ ") {
			t.Errorf("thread row %d: %q", r.id(), v.text(r, ColCommand))
		}
		n++
	}
	if n != 10 {
		t.Errorf("%d thread rows under PID 1, want 10", n)
	}
	var zombie string
	for _, r := range rows {
		if r.id() == 8286 {
			zombie = v.text(r, ColCommand)
		}
	}
	// The zombie has no command line: its name shows in brackets, under its
	// parent.
	if !strings.HasSuffix(zombie, "└─ [sleep]") {
		t.Errorf("zombie row command = %q", zombie)
	}
}

func TestCells(t *testing.T) {
	snap, rates := fixtureRates(t)
	v := View{Sort: ColPID}
	rows := v.Rows(snap, rates)
	cells := v.Cells(rows[0], nil)
	if cells[ColPID] != "1" || cells[ColFDs] != "48/32768" || cells[ColCPU] != "5.0" || cells[ColWake] != "100" {
		t.Errorf("PID 1 cells = %q", cells)
	}
	// The fixtures hold no exe link: no executable, so not a Go binary.
	if cells[ColGo] != "" {
		t.Errorf("go cell = %q, want empty", cells[ColGo])
	}
	line := FormatLine(cells, 40)
	if len([]rune(line)) > 40 || !strings.HasPrefix(line, "      1 ") {
		t.Errorf("FormatLine = %q", line)
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0"}, {1023, "1023"}, {1024, "1.0K"}, {1536, "1.5K"}, {10 << 20, "10M"}, {5 << 30, "5.0G"}, {3 << 40, "3.0T"},
	}
	for _, tt := range tests {
		if got := units.Bytes(tt.in); got != tt.want {
			t.Errorf("units.Bytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseColumn(t *testing.T) {
	if c, err := ParseColumn("WAKE"); err != nil || c != ColWake {
		t.Errorf("ParseColumn(WAKE) = %v, %v", c, err)
	}
	if _, err := ParseColumn("bogus"); err == nil || !strings.Contains(err.Error(), "wake") {
		t.Errorf("ParseColumn(bogus) error = %v", err)
	}
}

func TestRunJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	cfg := Config{Interval: 50 * time.Millisecond, Root: fixtures, JSON: true, Count: 2, View: View{Sort: ColPID, Threads: true}}
	if err := Run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(lines), out.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil {
		t.Fatal(err)
	}
	procs := rec["processes"].([]any)
	if len(procs) != 4 {
		t.Fatalf("%d processes", len(procs))
	}
	p1 := procs[0].(map[string]any)
	for _, k := range []string{"pid", "ppid", "comm", "state", "cpu_user_pct", "cpu_sys_pct", "rss_bytes", "threads",
		"fds", "fd_limit", "voluntary_ctxsw_per_s", "nonvoluntary_ctxsw_per_s", "go_version", "tasks"} {
		if _, ok := p1[k]; !ok {
			t.Errorf("process record lacks %q: %v", k, p1)
		}
	}
	if p1["pid"].(float64) != 1 || p1["fds"].(float64) != 48 || p1["go_version"] != "" || p1["syscalls_rw_per_s"] != nil {
		t.Errorf("pid 1 record = %v", p1)
	}
	tasks := p1["tasks"].([]any)
	if len(tasks) != 11 {
		t.Errorf("%d tasks, want 11", len(tasks))
	}
	for _, k := range []string{"tid", "comm", "cpu_user_pct", "cpu_sys_pct", "voluntary_ctxsw_per_s"} {
		if _, ok := tasks[0].(map[string]any)[k]; !ok {
			t.Errorf("task record lacks %q", k)
		}
	}
}

func TestRunOnceText(t *testing.T) {
	var out, errOut bytes.Buffer
	cfg := Config{Interval: 50 * time.Millisecond, Root: fixtures, Once: true, View: View{Sort: ColPID}}
	if err := Run(context.Background(), cfg, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "    PID USER") || !strings.Contains(text, "/tmp/a) b 300") || strings.Count(text, "\n") != 7 {
		t.Errorf("table:\n%s", text)
	}
}

func TestRunWatchedExit(t *testing.T) {
	cmd := exec.Command("sleep", "0.4")
	if err := cmd.Start(); err != nil {
		t.Fatalf("no sleep command: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var out, errOut bytes.Buffer
	cfg := Config{Interval: 100 * time.Millisecond, PIDs: []int{cmd.Process.Pid}, JSON: true, View: View{Threads: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := Run(ctx, cfg, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run did not stop when the watched process exited")
	}
	if !strings.Contains(errOut.String(), "exited") || !strings.Contains(out.String(), `"comm":"sleep"`) {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestRunNotFound(t *testing.T) {
	err := Run(context.Background(), Config{PIDs: []int{1 << 29}}, &bytes.Buffer{}, &bytes.Buffer{})
	if !errors.Is(err, ErrNotFound) || err.Error() != "process 536870912 not found" {
		t.Errorf("error = %v", err)
	}
}

// TestTableGolden pins the table top prints (header and rows, tree with
// threads) over the fixture host.
func TestTableGolden(t *testing.T) {
	snap, rates := fixtureRates(t)
	v := View{Sort: ColPID, Tree: true, Threads: true}
	var b strings.Builder
	b.WriteString(FormatLine(Header(), 0) + "\n")
	var cells []string
	for _, r := range v.Rows(snap, rates) {
		cells = v.Cells(r, cells)
		b.WriteString(FormatLine(cells, 0) + "\n")
	}
	golden.Check(t, "table.txt", []byte(b.String()))
}

// TestContainerTag: a containerised process's command starts with the
// short ID its cgroup path names (a pod's UID start when it names a pod
// only); nothing on the host or on thread rows; the filter finds a process
// by its container's runtime or ID.
func TestContainerTag(t *testing.T) {
	const id = "ed94a9f30d54ddbceffbcd03163966df878a2887f82ffc9cee52ff87dc668e1f"
	for _, tt := range []struct {
		cgroup, cell string
		filter       string
		match        bool
	}{
		{"/libpod_parent/libpod-" + id, "[ed94a9f30d54] /app -v", "podman", true},
		{"/system.slice/docker-" + id + ".scope", "[ed94a9f30d54] /app -v", "ED94A9", true},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod7a1c9e2f_4b3d.slice", "[pod 7a1c9e2f] /app -v", "besteffort", true},
		{"/system.slice/ssh.service", "/app -v", "podman", false},
		{"", "/app -v", "docker", false},
	} {
		v := View{Filter: tt.filter}
		p := &proc.Proc{PID: 7, Comm: "app", Cmdline: "/app -v", Cgroup: tt.cgroup}
		if got := v.text(Row{Proc: p}, ColCommand); got != tt.cell {
			t.Errorf("%q: cell %q, want %q", tt.cgroup, got, tt.cell)
		}
		if got := v.text(Row{Proc: p, Task: &proc.Task{TID: 8, Comm: "worker"}}, ColCommand); got != "worker" {
			t.Errorf("%q: thread row's cell %q, want worker", tt.cgroup, got)
		}
		if got := v.match(p); got != tt.match {
			t.Errorf("%q: filter %q matches %v, want %v", tt.cgroup, tt.filter, got, tt.match)
		}
	}
}
