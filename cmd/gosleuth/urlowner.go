package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/gosleuth/gosleuth/internal/load"
	"github.com/gosleuth/gosleuth/internal/proc"
)

// memoryHint tells a user why a runtime URL is rarely needed.
const memoryHint = "gosleuth reads the runtime of most Go programs from their memory (as root or their user) without any URL"

// checkURLOwners checks that each runtime URL given (empty ones are
// skipped) is served by process pid or one of its descendants, so that
// another program's runtime is never reported under pid's name. A URL
// served on this host by another process is refused in one line naming
// that process; a URL whose server cannot be found (another host, or a
// socket owner gosleuth may not see) is accepted with a warning on warn.
func checkURLOwners(warn io.Writer, procRoot string, pid int, urls ...string) error {
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		owner, why := urlOwner(procRoot, raw)
		switch {
		case owner == 0:
			fmt.Fprintf(warn, "warning: cannot check that %s is pid %d's (%s): its runtime figures are trusted to be pid %d's\n", raw, pid, why, pid)
		case !descendsFrom(procRoot, owner, pid):
			return fmt.Errorf("%s is served by pid %d (%s), not by pid %d or its children: its runtime is another program's; drop the URL (%s) or give that process's URL",
				raw, owner, commOf(procRoot, owner), pid, memoryHint)
		}
	}
	return nil
}

// urlOwner returns the PID of the local process listening on raw's port,
// or 0 and why it cannot be told.
func urlOwner(procRoot, raw string) (int, string) {
	u, err := url.Parse(raw)
	if err != nil {
		return 0, "unparsable URL"
	}
	if !load.IsLocalHost(u.Hostname()) {
		return 0, "its host is not this machine"
	}
	port, err := strconv.Atoi(u.Port())
	if u.Port() == "" {
		port, err = map[string]int{"http": 80, "https": 443}[u.Scheme], nil
	}
	if err != nil || port <= 0 {
		return 0, "no port"
	}
	pid, err := proc.NewFS(procRoot).ListenerPID(port)
	if err != nil {
		return 0, err.Error()
	}
	return pid, ""
}

// descendsFrom reports whether pid is ancestor or one of its descendants,
// following the children of every thread from ancestor down.
func descendsFrom(procRoot string, pid, ancestor int) bool {
	fs := proc.NewFS(procRoot)
	seen := map[int]bool{}
	for queue := []int{ancestor}; len(queue) > 0 && len(seen) < 4096; {
		p := queue[0]
		queue = queue[1:]
		if p == pid {
			return true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		tids, err := fs.TaskIDs(p)
		if err != nil {
			continue
		}
		for _, tid := range tids {
			queue = append(queue, fs.Children(p, tid)...)
		}
	}
	return false
}

// commOf is pid's command name, or "?" when it has gone.
func commOf(procRoot string, pid int) string {
	if c := proc.NewFS(procRoot).Comm(pid); c != "" {
		return c
	}
	return "?"
}
