package proc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrParse reports a /proc file whose content does not have the expected form.
var ErrParse = errors.New("malformed /proc file")

// statFields holds the fields of /proc/PID/stat and /proc/PID/task/TID/stat
// that gosleuth uses. Times are in clock ticks (USER_HZ), RSS in pages.
// Every numeric field is a uint64, so one parse loop fills them all.
type statFields struct {
	PID       int32
	Comm      []byte // aliases the input buffer
	State     byte
	PPID      uint64
	Flags     uint64
	MinFlt    uint64
	MajFlt    uint64
	UTime     uint64
	STime     uint64
	CUTime    uint64
	CSTime    uint64
	Threads   uint64
	StartTime uint64
	RSSPages  uint64
	Processor uint64
}

// pfKthread is PF_KTHREAD in the stat flags field.
const pfKthread = 0x00200000

// parseStat parses a stat file. The command name sits between the first '('
// and the last ')', because it may itself contain spaces and parentheses.
func parseStat(b []byte, s *statFields) error {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return fmt.Errorf("parse stat: %w: no command name", ErrParse)
	}
	pid, ok := atou(trimSpace(b[:open]))
	if !ok {
		return fmt.Errorf("parse stat: %w: bad pid", ErrParse)
	}
	s.PID = int32(pid)
	s.Comm = b[open+1 : closing]
	rest := b[closing+1:]
	// Fields are numbered as in proc(5): the state is field 3.
	field := 2
	for len(rest) > 0 {
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		if len(rest) == 0 || rest[0] == '\n' {
			break
		}
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		tok := rest[:end]
		rest = rest[end:]
		field++
		if field == 3 {
			s.State = tok[0]
			continue
		}
		if field > 39 {
			break
		}
		dst := s.field(field)
		if dst == nil {
			continue
		}
		if *dst, ok = atou(trimSpace(tok)); !ok {
			// cutime and cstime are signed in the kernel's format but never
			// negative; anything else unparsable is an error.
			return fmt.Errorf("parse stat: %w: field %d %q", ErrParse, field, tok)
		}
	}
	if field < 24 {
		return fmt.Errorf("parse stat: %w: only %d fields", ErrParse, field)
	}
	return nil
}

// field returns where stat field n (numbered as in proc(5)) goes, or nil
// for the fields gosleuth does not use.
func (s *statFields) field(n int) *uint64 {
	switch n {
	case 4:
		return &s.PPID
	case 9:
		return &s.Flags
	case 10:
		return &s.MinFlt
	case 12:
		return &s.MajFlt
	case 14:
		return &s.UTime
	case 15:
		return &s.STime
	case 16:
		return &s.CUTime
	case 17:
		return &s.CSTime
	case 20:
		return &s.Threads
	case 22:
		return &s.StartTime
	case 24:
		return &s.RSSPages
	case 39:
		return &s.Processor
	}
	return nil
}

// parseSchedstat parses /proc/.../schedstat: time on CPU and waiting on a run
// queue (ns) and the number of timeslices run.
func parseSchedstat(b []byte) (run, wait, slices uint64, err error) {
	var vals [3]uint64
	for i := range vals {
		var ok bool
		if vals[i], b, ok = leadingNumber(b); !ok {
			return 0, 0, 0, fmt.Errorf("parse schedstat: %w", ErrParse)
		}
	}
	return vals[0], vals[1], vals[2], nil
}

var (
	keyVol    = []byte("\nvoluntary_ctxt_switches:")
	keyInvol  = []byte("\nnonvoluntary_ctxt_switches:")
	keySyscr  = []byte("syscr:")
	keySyscw  = []byte("syscw:")
	keyNoFile = []byte("\nMax open files")
)

// parseStatusCtxsw reads the voluntary and involuntary context switch counts
// from a status file.
func parseStatusCtxsw(b []byte) (vol, invol uint64, err error) {
	vol, ok1 := numberAfterLast(b, keyVol)
	invol, ok2 := numberAfterLast(b, keyInvol)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("parse status: %w: no ctxt_switches", ErrParse)
	}
	return vol, invol, nil
}

// parseIO reads syscr and syscw (read-like and write-like syscalls) from an
// io file.
func parseIO(b []byte) (syscr, syscw uint64, err error) {
	syscr, ok1 := numberAfter(b, keySyscr)
	syscw, ok2 := numberAfter(b, keySyscw)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("parse io: %w: no syscr/syscw", ErrParse)
	}
	return syscr, syscw, nil
}

// Unlimited is the value of a resource limit set to "unlimited".
const Unlimited = int64(^uint64(0) >> 1)

// parseLimitsNoFile reads the soft "Max open files" limit from a limits file.
func parseLimitsNoFile(b []byte) (int64, error) {
	i := bytes.Index(b, keyNoFile)
	if i < 0 {
		return 0, fmt.Errorf("parse limits: %w: no Max open files", ErrParse)
	}
	rest := skipSpace(b[i+len(keyNoFile):])
	if bytes.HasPrefix(rest, []byte("unlimited")) {
		return Unlimited, nil
	}
	v, _, ok := leadingNumber(rest)
	if !ok {
		return 0, fmt.Errorf("parse limits: %w: bad Max open files", ErrParse)
	}
	return int64(v), nil
}

// numberAfter returns the decimal number that follows key (after blanks).
func numberAfter(b, key []byte) (uint64, bool) {
	return numberAt(b, bytes.Index(b, key), key)
}

// numberAfterLast is numberAfter for keys near the end of the file (the
// context switch counts end a status file).
func numberAfterLast(b, key []byte) (uint64, bool) {
	return numberAt(b, bytes.LastIndex(b, key), key)
}

func numberAt(b []byte, i int, key []byte) (uint64, bool) {
	if i < 0 {
		return 0, false
	}
	v, _, ok := leadingNumber(b[i+len(key):])
	return v, ok
}

// leadingNumber parses the decimal number at the start of b (after blanks)
// and returns what follows it.
func leadingNumber(b []byte) (v uint64, rest []byte, ok bool) {
	b = skipSpace(b)
	end := 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	v, ok = atou(b[:end])
	return v, b[end:], ok
}

// atou parses a non-empty unsigned decimal without allocating.
func atou(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

func trimSpace(b []byte) []byte {
	b = skipSpace(b)
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}

// cmdlineString turns a NUL-separated cmdline into a space-separated string.
// cgroupPath picks one path from /proc/PID/cgroup: the unified hierarchy's
// ("0::/a/b"), else the name=systemd or cpu controller's v1 path, else the
// first line's. On a hybrid host the unified path is "/" for everything
// while the v1 paths name the unit or container, so "/" comes last.
func cgroupPath(b []byte) string {
	var v1systemd, v1cpu, unified, first string
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrl, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if first == "" {
			first = path
		}
		switch {
		case id == "0" && ctrl == "" && path != "/":
			return path
		case id == "0" && ctrl == "":
			unified = path
		case ctrl == "name=systemd":
			v1systemd = path
		case slices.Contains(strings.Split(ctrl, ","), "cpu"):
			v1cpu = path
		}
	}
	switch {
	case v1systemd != "":
		return v1systemd
	case v1cpu != "":
		return v1cpu
	case unified != "":
		return unified
	}
	return first
}

func cmdlineString(b []byte) string {
	b = bytes.TrimRight(b, "\x00")
	out := make([]byte, len(b))
	for i, c := range b {
		if c == 0 || c == '\n' {
			c = ' '
		}
		out[i] = c
	}
	return string(out)
}
