package goruntime

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// GoroutineDump is a goroutine dump grouped by identical stacks, largest
// groups first.
type GoroutineDump struct {
	// Total is the number of goroutines in the dump.
	Total  int              `json:"total"`
	Groups []GoroutineGroup `json:"groups"`
}

// GoroutineGroup is a set of goroutines with the same stack (functions and
// lines) and the same creator.
type GoroutineGroup struct {
	Count int `json:"count"`
	// States counts the goroutines by wait reason ("chan receive",
	// "running", "sync.Mutex.Lock", ...), State is the most common.
	State  string         `json:"state"`
	States map[string]int `json:"states"`
	// MinWaitMinutes and MaxWaitMinutes bound how long the group's
	// goroutines have been blocked; the runtime prints waits of at least
	// one minute only, so 0 means under a minute.
	MinWaitMinutes int `json:"min_wait_minutes"`
	MaxWaitMinutes int `json:"max_wait_minutes"`
	// LockedToThread counts goroutines locked to their OS thread.
	LockedToThread int     `json:"locked_to_thread,omitempty"`
	Frames         []Frame `json:"frames"`
	// CreatedBy is the frame of the go statement that started them.
	CreatedBy *Frame `json:"created_by,omitempty"`
}

// Frame is one stack frame.
type Frame struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// String formats the frame as "func (file:line)".
func (f Frame) String() string { return fmt.Sprintf("%s (%s:%d)", f.Func, f.File, f.Line) }

// ParseGoroutines parses a goroutine dump in the format of
// runtime/pprof's goroutine profile with debug=2 (the same as a panic's
// traceback) and groups it. Malformed input gives an error wrapping
// ErrMalformed.
func ParseGoroutines(b []byte) (*GoroutineDump, error) {
	groups := map[string]*GoroutineGroup{}
	var order []string
	dump := &GoroutineDump{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		cur      *GoroutineGroup
		state    string
		wait     int
		locked   bool
		key      strings.Builder
		pending  string // a function line waiting for its file line
		inCreate bool
		lineNo   int
	)
	finish := func() {
		if cur == nil {
			return
		}
		k := key.String()
		g, ok := groups[k]
		if !ok {
			g = cur
			g.States = map[string]int{}
			g.MinWaitMinutes = wait
			groups[k] = g
			order = append(order, k)
		}
		g.Count++
		g.States[state]++
		g.MinWaitMinutes = min(g.MinWaitMinutes, wait)
		g.MaxWaitMinutes = max(g.MaxWaitMinutes, wait)
		if locked {
			g.LockedToThread++
		}
		dump.Total++
		cur = nil
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goroutine "):
			finish()
			open, end := strings.IndexByte(line, '['), strings.LastIndexByte(line, ']')
			if open < 0 || end < open {
				return nil, fmt.Errorf("goroutine dump line %d: %w: no state in %q", lineNo, ErrMalformed, line)
			}
			state, wait, locked = parseGoroutineState(line[open+1 : end])
			cur = &GoroutineGroup{}
			key.Reset()
			pending, inCreate = "", false
		case cur == nil:
			// Text outside a goroutine (a header line): skip.
		case line == "":
			finish()
		case strings.HasPrefix(line, "\t"):
			if pending == "" {
				continue
			}
			file, ln := parseFileLine(strings.TrimSpace(line))
			fr := Frame{Func: pending, File: file, Line: ln}
			if inCreate {
				cur.CreatedBy = &fr
			} else {
				cur.Frames = append(cur.Frames, fr)
			}
			key.WriteString(fr.Func)
			key.WriteByte(' ')
			key.WriteString(file)
			key.WriteByte(':')
			key.WriteString(strconv.Itoa(ln))
			key.WriteByte('\n')
			pending = ""
		case strings.HasPrefix(line, "created by "):
			inCreate = true
			fn := strings.TrimPrefix(line, "created by ")
			if i := strings.Index(fn, " in goroutine "); i >= 0 {
				fn = fn[:i]
			}
			pending = fn
			key.WriteString("created by ")
		case strings.HasPrefix(line, "..."):
			key.WriteString(line)
			key.WriteByte('\n')
		default:
			pending = stripArgs(line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("goroutine dump: %w: %w", ErrMalformed, err)
	}
	finish()
	if dump.Total == 0 && len(bytes.TrimSpace(b)) > 0 {
		return nil, fmt.Errorf("goroutine dump: %w: no goroutine found", ErrMalformed)
	}
	for _, k := range order {
		g := groups[k]
		best := -1
		for s, n := range g.States {
			if n > best || (n == best && s < g.State) {
				g.State, best = s, n
			}
		}
		dump.Groups = append(dump.Groups, *g)
	}
	sort.SliceStable(dump.Groups, func(i, j int) bool { return dump.Groups[i].Count > dump.Groups[j].Count })
	return dump, nil
}

// parseGoroutineState splits "chan receive, 5 minutes, locked to thread".
func parseGoroutineState(s string) (state string, minutes int, locked bool) {
	parts := strings.Split(s, ", ")
	state = parts[0]
	for _, p := range parts[1:] {
		switch {
		case p == "locked to thread":
			locked = true
		case strings.HasSuffix(p, " minutes"):
			minutes, _ = strconv.Atoi(strings.TrimSuffix(p, " minutes"))
		default:
			state += ", " + p
		}
	}
	return state, minutes, locked
}

// stripArgs drops the argument list of a traceback function line:
// "main.(*T).run(0xc000010000, 0x1)" becomes "main.(*T).run".
func stripArgs(s string) string {
	if strings.HasSuffix(s, ")") {
		if i := strings.LastIndexByte(s, '('); i > 0 {
			return s[:i]
		}
	}
	return s
}

// parseFileLine splits "/src/x.go:12 +0x1d" into file and line.
func parseFileLine(s string) (string, int) {
	if i := strings.LastIndex(s, " +0x"); i >= 0 {
		s = s[:i]
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, 0
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return s, 0
	}
	return s[:i], n
}
