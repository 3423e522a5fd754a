package export

import (
	"fmt"
	"path"
	"strings"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Group kinds, in the order they are tried by default.
const (
	KindUnit      = "unit"      // a systemd service ("ssh.service")
	KindContainer = "container" // a container or pod, from the cgroup path
	KindExe       = "exe"       // the executable's name (comm)
	// KindShort is the one group of processes seen in one sample only
	// (they lived less than about an interval): their CPU and switches
	// count there, so a host that starts many short-lived programs adds
	// no series for them.
	KindShort = "short-lived"
)

// ParseGroupBy parses a --group-by list such as "unit,container,exe". The
// executable name always ends the list, so every process has a group.
func ParseGroupBy(s string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(s, ",") {
		switch k = strings.TrimSpace(k); k {
		case KindUnit, KindContainer, KindExe:
			for _, o := range out {
				if o == k {
					return nil, fmt.Errorf("--group-by: %q given twice", k)
				}
			}
			out = append(out, k)
		default:
			return nil, fmt.Errorf("--group-by: %q is not unit, container or exe", k)
		}
	}
	if out[len(out)-1] != KindExe {
		out = append(out, KindExe)
	}
	return out, nil
}

// groupOf names the group of a process from its cgroup path and comm, trying
// the kinds in order. It parses the path only (no container runtime or
// systemd API is asked): "/system.slice/ssh.service" is unit ssh.service;
// ".../docker-<id>.scope", "/docker/<id>", "cri-containerd-<id>.scope",
// "crio-<id>.scope" and "libpod-<id>.scope" are containers (id cut to 12
// characters), and a kubepods path names its pod ("pod" + UID) when no
// container ID is in it.
func groupOf(kinds []string, cgroup, comm string) (kind, name string) {
	for _, k := range kinds {
		switch k {
		case KindUnit:
			if u := unitOf(cgroup); u != "" {
				return KindUnit, u
			}
		case KindContainer:
			if c := containerOf(cgroup); c != "" {
				return KindContainer, c
			}
		case KindExe:
			return KindExe, comm
		}
	}
	return KindExe, comm
}

// unitOf returns the innermost systemd service in a cgroup path.
func unitOf(cg string) string {
	for p := cg; p != "/" && p != "." && p != ""; p = path.Dir(p) {
		if b := path.Base(p); strings.HasSuffix(b, ".service") {
			return b
		}
	}
	return ""
}

// containerOf returns "<runtime>/<id12>" or "pod/<uid>" from a cgroup path:
// the runtime as the path's directory names it ("docker", "cri-containerd",
// "crio", "libpod"), "container" for a bare ID directory.
func containerOf(cg string) string {
	c, ok := proc.ParseContainer(cg)
	switch {
	case !ok:
		return ""
	case c.ID == "":
		return "pod/" + c.PodUID
	}
	prefix := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(c.Dir, ".scope"), c.ID), "-")
	if prefix == "" {
		prefix = "container"
	}
	return prefix + "/" + c.ShortID()
}
