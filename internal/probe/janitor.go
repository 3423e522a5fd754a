package probe

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// staleEvents returns the "group/name" of each definition in the text of
// tracefs's uprobe_events that a gosleuth process made (group
// gosleuth_<PID>) and whose process is not alive. Other lines, and
// malformed ones, are left alone: the file is the kernel's, shared with
// every other tracer.
func staleEvents(b []byte, alive func(pid int) bool) []string {
	var stale []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "p:gosleuth_1234/f0 /path:0x0000000000001234"
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		_, ev, ok := strings.Cut(f[0], ":")
		group, name, ok2 := strings.Cut(ev, "/")
		if !ok || !ok2 || name == "" || !strings.HasPrefix(group, "gosleuth_") {
			continue
		}
		digits := strings.TrimPrefix(group, "gosleuth_")
		pid, err := strconv.Atoi(digits)
		if err != nil || pid <= 0 || strconv.Itoa(pid) != digits {
			continue
		}
		if !alive(pid) {
			stale = append(stale, ev)
		}
	}
	return stale
}
