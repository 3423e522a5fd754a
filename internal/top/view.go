package top

import (
	"cmp"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/gosleuth/gosleuth/internal/termsafe"
	"github.com/gosleuth/gosleuth/internal/units"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Column identifies a column of the table; it is also a sort key.
type Column int

// The table's columns, in display order.
const (
	ColPID Column = iota
	ColUser
	ColState
	ColCPU
	ColUsr
	ColSys
	ColRSS
	ColThreads
	ColFDs
	ColWake
	ColNvcsw
	ColRunQ
	ColSyscalls
	ColGo
	ColCommand
	numColumns
)

type columnInfo struct {
	name  string // sort key name for --sort
	title string
	width int // 0: the rest of the line
	left  bool
}

var columns = [numColumns]columnInfo{
	ColPID:     {"pid", "PID", 7, false},
	ColUser:    {"user", "USER", 8, true},
	ColState:   {"state", "S", 1, true},
	ColCPU:     {"cpu", "CPU%", 6, false},
	ColUsr:     {"usr", "USR%", 6, false},
	ColSys:     {"sys", "SYS%", 6, false},
	ColRSS:     {"rss", "RSS", 7, false},
	ColThreads: {"thr", "THR", 4, false},
	ColFDs:     {"fds", "FDS/LIMIT", 12, false},
	ColWake:    {"wake", "WAKE/s", 7, false},
	ColNvcsw:   {"nvcsw", "NVCSW/s", 7, false},
	// RUNQ% is time runnable but waiting for a CPU: scheduler latency.
	ColRunQ: {"runq", "RUNQ%", 5, false},
	// RWSC/s is read- and write-class syscalls per second (syscr+syscw of
	// /proc/PID/io): not every syscall, and named so.
	ColSyscalls: {"sysc", "RWSC/s", 7, false},
	ColGo:       {"go", "GO", 9, true},
	ColCommand:  {"command", "COMMAND", 0, true},
}

// ParseColumn returns the column named by a --sort value.
func ParseColumn(name string) (Column, error) {
	for i, c := range columns {
		if c.name == strings.ToLower(name) {
			return Column(i), nil
		}
	}
	names := make([]string, 0, len(columns))
	for _, c := range columns {
		names = append(names, c.name)
	}
	return 0, fmt.Errorf("unknown sort column %q (one of %s)", name, strings.Join(names, ", "))
}

// Row is one line of the table: a process, or one of its threads.
type Row struct {
	Proc *proc.Proc
	Rate *proc.ProcRate
	// Task and TaskRate are set on thread rows.
	Task     *proc.Task
	TaskRate *proc.TaskRate
	// Prefix draws the tree (and thread) structure before the command.
	Prefix string
}

// View turns a snapshot and its rates into ordered rows.
type View struct {
	Sort Column
	// Reverse flips the sort order (numbers sort largest first by default).
	Reverse bool
	Tree    bool
	Threads bool
	// Kernel shows kernel threads.
	Kernel bool
	// Filter keeps processes whose PID equals it or whose name or command
	// line contains it (case-insensitive).
	Filter string

	users map[uint32]string
	// containers caches each cgroup path's container (nil: none).
	containers map[string]*proc.Container
	rows       []Row
	idx        []int
}

// Rows builds the table. The returned slice is reused by the next call.
func (v *View) Rows(snap *proc.Snapshot, rates *proc.Rates) []Row {
	v.rows = v.rows[:0]
	v.idx = v.idx[:0]
	for i := range snap.Procs {
		p := &snap.Procs[i]
		if p.Kernel && !v.Kernel {
			continue
		}
		v.idx = append(v.idx, i)
	}
	less := func(a, b int) int { return v.compareProc(snap, rates, a, b) }
	if !v.Tree {
		slices.SortFunc(v.idx, less)
		for _, i := range v.idx {
			if v.match(&snap.Procs[i]) {
				v.addProc(snap, rates, i, "", "")
			}
		}
		return v.rows
	}
	// Tree: children grouped under parents, siblings sorted; with a filter,
	// matching processes are shown with their ancestors.
	present := make(map[int32]int, len(v.idx))
	for _, i := range v.idx {
		present[snap.Procs[i].PID] = i
	}
	children := make(map[int32][]int)
	var roots []int
	for _, i := range v.idx {
		p := &snap.Procs[i]
		if _, ok := present[p.PPID]; ok && p.PPID != p.PID {
			children[p.PPID] = append(children[p.PPID], i)
		} else {
			roots = append(roots, i)
		}
	}
	var keep map[int]bool
	if v.Filter != "" {
		keep = make(map[int]bool)
		for _, i := range v.idx {
			if !v.match(&snap.Procs[i]) {
				continue
			}
			for j, ok := i, true; ok && !keep[j]; j, ok = present[snap.Procs[j].PPID] {
				keep[j] = true
			}
		}
	}
	var walk func(list []int, indent string)
	walk = func(list []int, indent string) {
		slices.SortFunc(list, less)
		var shown []int
		for _, i := range list {
			if keep == nil || keep[i] {
				shown = append(shown, i)
			}
		}
		for n, i := range shown {
			branch, next := "├─ ", "│  "
			if n == len(shown)-1 {
				branch, next = "└─ ", "   "
			}
			if indent == "" {
				branch, next = "", " "
			}
			v.addProc(snap, rates, i, indent+branch, indent+next)
			walk(children[snap.Procs[i].PID], indent+next)
		}
	}
	walk(roots, "")
	return v.rows
}

// addProc adds process i and, in thread view, its threads; prefix goes before
// the process's command and under is the indent of what hangs below it.
func (v *View) addProc(snap *proc.Snapshot, rates *proc.Rates, i int, prefix, under string) {
	p := &snap.Procs[i]
	var rate *proc.ProcRate
	if rates != nil && i < len(rates.Procs) && rates.Procs[i].Proc == p {
		rate = &rates.Procs[i]
	}
	v.rows = append(v.rows, Row{Proc: p, Rate: rate, Prefix: prefix})
	if !v.Threads || p.Threads <= 1 {
		return
	}
	tasks := snap.TasksOf(p)
	start := len(v.rows)
	for ti := range tasks {
		t := &tasks[ti]
		if t.TID == p.PID {
			continue
		}
		row := Row{Proc: p, Rate: rate, Task: t, Prefix: under + "┊ "}
		if rate != nil {
			lo, _ := snap.TaskRange(p)
			if k := lo + ti; k < len(rates.Tasks) && rates.Tasks[k].Task == t {
				row.TaskRate = &rates.Tasks[k]
			}
		}
		v.rows = append(v.rows, row)
	}
	thr := v.rows[start:]
	slices.SortStableFunc(thr, v.compareRows)
}

func (v *View) match(p *proc.Proc) bool {
	f := strings.TrimSpace(v.Filter)
	if f == "" {
		return true
	}
	if n, err := strconv.Atoi(f); err == nil {
		return int(p.PID) == n
	}
	f = strings.ToLower(f)
	if c := v.Container(p); c != nil && strings.Contains(c.String(), f) {
		return true
	}
	return strings.Contains(strings.ToLower(p.Comm), f) || strings.Contains(strings.ToLower(p.Cmdline), f)
}

// Container is the container process p runs in, from its cgroup path; nil
// when the path names none.
func (v *View) Container(p *proc.Proc) *proc.Container {
	if p.Cgroup == "" {
		return nil
	}
	if c, ok := v.containers[p.Cgroup]; ok {
		return c
	}
	if v.containers == nil || len(v.containers) > 4096 {
		v.containers = make(map[string]*proc.Container)
	}
	var cp *proc.Container
	if c, ok := proc.ParseContainer(p.Cgroup); ok {
		cp = &c
	}
	v.containers[p.Cgroup] = cp
	return cp
}

func (v *View) compareProc(snap *proc.Snapshot, rates *proc.Rates, a, b int) int {
	ra := Row{Proc: &snap.Procs[a]}
	rb := Row{Proc: &snap.Procs[b]}
	if rates != nil && len(rates.Procs) == len(snap.Procs) {
		ra.Rate, rb.Rate = &rates.Procs[a], &rates.Procs[b]
	}
	return v.compareRows(ra, rb)
}

// compareRows orders two rows by the sort column, then by PID/TID. Numbers
// sort largest first, text and IDs in reading order; Reverse flips that.
func (v *View) compareRows(a, b Row) int {
	var c int
	desc := true
	switch v.Sort {
	case ColUser, ColCommand, ColGo, ColState:
		c = cmp.Compare(v.text(a, v.Sort), v.text(b, v.Sort))
		desc = false
	case ColPID:
		c = cmp.Compare(a.id(), b.id())
		desc = false
	default:
		c = cmp.Compare(v.number(a, v.Sort), v.number(b, v.Sort))
	}
	if desc != v.Reverse {
		c = -c
	}
	if c == 0 {
		c = cmp.Compare(a.id(), b.id())
	}
	return c
}

func (r Row) id() int32 {
	if r.Task != nil {
		return r.Task.TID
	}
	return r.Proc.PID
}

// number is the numeric value of a row in a column, for sorting.
func (v *View) number(r Row, c Column) float64 {
	rt := r.rates()
	switch c {
	case ColCPU:
		return rt.usr + rt.sys
	case ColUsr:
		return rt.usr
	case ColSys:
		return rt.sys
	case ColRSS:
		return float64(r.Proc.RSSBytes)
	case ColThreads:
		return float64(r.Proc.Threads)
	case ColFDs:
		if r.Proc.Known&proc.KnownFDs == 0 {
			return -1
		}
		return float64(r.Proc.FDs)
	case ColWake:
		return rt.wake
	case ColNvcsw:
		return rt.nvcsw
	case ColRunQ:
		return rt.runq
	case ColSyscalls:
		return rt.syscalls
	}
	return 0
}

// rowRates are the per-second figures of a row; ok is false before a row
// has been seen twice.
type rowRates struct {
	ok                          bool
	usr, sys, wake, nvcsw, runq float64
	syscalls                    float64 // -1: unknown (and for threads)
}

func (r Row) rates() rowRates {
	if r.Task != nil {
		if r.TaskRate == nil || r.TaskRate.New {
			return rowRates{syscalls: -1}
		}
		t := r.TaskRate
		return rowRates{true, t.UserPct, t.SysPct, t.VolPerSec, t.InvolPerSec, t.RunQueuePct, -1}
	}
	if r.Rate == nil || r.Rate.New {
		return rowRates{syscalls: -1}
	}
	p := r.Rate
	return rowRates{true, p.UserPct, p.SysPct, p.VolPerSec, p.InvolPerSec, p.RunQueuePct, p.SyscallsPerSec}
}

// text is the cell text of a row in a column.
func (v *View) text(r Row, c Column) string {
	p := r.Proc
	switch c {
	case ColPID:
		return strconv.Itoa(int(r.id()))
	case ColUser:
		return v.userName(p.UID)
	case ColState:
		if r.Task != nil {
			return string(rune(r.Task.State))
		}
		return string(rune(p.State))
	case ColCPU, ColUsr, ColSys, ColWake, ColNvcsw, ColRunQ, ColSyscalls:
		if !r.rates().ok {
			return "…"
		}
		x := v.number(r, c)
		switch {
		case c == ColSyscalls && r.Task != nil:
			return ""
		case c == ColSyscalls && x < 0:
			return "-"
		case c == ColWake || c == ColNvcsw || c == ColSyscalls:
			return strconv.FormatFloat(x, 'f', 0, 64)
		}
		return strconv.FormatFloat(x, 'f', 1, 64)
	case ColRSS:
		if r.Task != nil {
			return ""
		}
		return units.Bytes(p.RSSBytes)
	case ColThreads:
		if r.Task != nil {
			return ""
		}
		return strconv.Itoa(int(p.Threads))
	case ColFDs:
		if r.Task != nil {
			return ""
		}
		fds, lim := "-", "-"
		if p.Known&proc.KnownFDs != 0 {
			fds = strconv.Itoa(int(p.FDs))
		}
		if p.Known&proc.KnownFDLimit != 0 {
			lim = formatLimit(p.FDLimit)
		}
		return fds + "/" + lim
	case ColGo:
		if r.Task != nil {
			return ""
		}
		if p.Known&proc.KnownExe == 0 {
			return "-"
		}
		return p.GoVersion // go1.26.8, as every command writes it
	case ColCommand:
		// Any user names their process and writes its command line.
		if r.Task != nil {
			return r.Prefix + termsafe.String(r.Task.Comm)
		}
		cmd := p.Cmdline
		switch {
		case cmd != "":
		case !p.Kernel && p.State != 'Z' && p.Known&proc.KnownExe == 0:
			cmd = p.Comm // first seen this refresh: its command line is read at the next
		default:
			cmd = "[" + p.Comm + "]"
		}
		return r.Prefix + containerTag(v.Container(p)) + termsafe.String(cmd)
	}
	return ""
}

// containerTag goes before a containerised process's command: the
// container's short ID ("[ed94a9f30d54] "), or "pod" and the start of a pod's
// UID where the path names a pod only; "" on the host. A tag rather than a
// column: the table stays within 120 columns of terminal.
func containerTag(c *proc.Container) string {
	switch {
	case c == nil:
		return ""
	case c.ID == "":
		return "[pod " + c.PodUID[:min(len(c.PodUID), 8)] + "] "
	}
	return "[" + c.ShortID() + "] "
}

func (v *View) userName(uid uint32) string {
	if name, ok := v.users[uid]; ok {
		return name
	}
	if v.users == nil {
		v.users = make(map[uint32]string)
	}
	name := strconv.Itoa(int(uid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	v.users[uid] = name
	return name
}

func formatLimit(n int64) string {
	if n == proc.Unlimited {
		return "inf"
	}
	return strconv.FormatInt(n, 10)
}

// Header returns the column titles, padded like cells.
func Header() []string {
	out := make([]string, numColumns)
	for i, c := range columns {
		out[i] = c.title
	}
	return out
}

// Cells returns the row's cell texts in column order.
func (v *View) Cells(r Row, out []string) []string {
	out = out[:0]
	for c := Column(0); c < numColumns; c++ {
		out = append(out, v.text(r, c))
	}
	return out
}

// FormatLine lays out cells in fixed-width columns, cut to width runes
// (0: no limit).
func FormatLine(cells []string, width int) string {
	var b strings.Builder
	for i, c := range columns {
		s := cells[i]
		if i > 0 {
			b.WriteByte(' ')
		}
		if c.width == 0 {
			b.WriteString(s)
			continue
		}
		n := len([]rune(s))
		if n > c.width {
			r := []rune(s)
			s = string(r[:c.width])
			n = c.width
		}
		pad := strings.Repeat(" ", c.width-n)
		if c.left {
			b.WriteString(s + pad)
		} else {
			b.WriteString(pad + s)
		}
	}
	line := b.String()
	if width > 0 {
		if r := []rune(line); len(r) > width {
			line = string(r[:width])
		}
	}
	return strings.TrimRight(line, " ")
}
