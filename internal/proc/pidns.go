package proc

import (
	"bytes"
	"strconv"
	"strings"
)

// parseNSpid returns the PIDs of a status file's NSpid line, outermost
// namespace (the procfs's) first; nil without one.
func parseNSpid(b []byte) []int {
	return statusInts(b, "NSpid:")
}

// fdinfoPid is a pidfd's fdinfo "Pid:" field, -1 without one.
func fdinfoPid(b []byte) int {
	if v := statusInts(b, "Pid:"); len(v) == 1 {
		return v[0]
	}
	return -1
}

// statusInts returns the numbers of the line starting with key in a
// status-like file ("NSpid:\t27501\t1"); nil without the line or with a
// field that is not a number.
func statusInts(b []byte, key string) []int {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte(key))
		if !ok {
			continue
		}
		var out []int
		for _, f := range strings.Fields(string(rest)) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	return nil
}
