package proc

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"
)

// Container runtimes as Container.Runtime names them.
const (
	RuntimePodman     = "podman"     // libpod-<id>, also under /libpod_parent
	RuntimeDocker     = "docker"     // docker-<id>.scope or /docker/<id>
	RuntimeContainerd = "containerd" // cri-containerd-<id>.scope
	RuntimeCRIO       = "cri-o"      // crio-<id>.scope
	// RuntimeKubernetes is a container under kubepods whose runtime the
	// path does not say (the cgroupfs driver's /kubepods/<qos>/pod<uid>/<id>),
	// or a pod with no container ID in the path (its sandbox's cgroup).
	RuntimeKubernetes = "kubernetes"
)

// Container is the container a process runs in, as its cgroup path (and
// where that says nothing, its mounts) shows it: no container runtime or
// Kubernetes API is asked. What the kernel does not show (the image, the
// container's and the pod's names, the pod's namespace) comes from the
// runtime's own files on the host where they can be read (AddNames), and
// is empty otherwise.
type Container struct {
	// Runtime is one of the Runtime constants.
	Runtime string `json:"runtime"`
	// ID is the container's full ID (64 hex digits for the runtimes
	// above); empty for a pod known only by its UID.
	ID string `json:"id,omitempty"`
	// PodUID and QoS are the Kubernetes pod's UID and QoS class
	// ("guaranteed", "burstable" or "besteffort"), for a path under
	// kubepods.
	PodUID string `json:"pod_uid,omitempty"`
	QoS    string `json:"qos,omitempty"`
	// Dir is the cgroup directory that names the container as written
	// ("libpod-<id>", "docker-<id>.scope", "<id>"), or the mount source that
	// did; Source says which file it came from: "cgroup" or "mountinfo".
	Dir    string `json:"dir"`
	Source string `json:"source"`
	// Name is the container's name, Image the image it was started from
	// as the runtime was asked for it ("registry.example/app:v1"), PodName
	// and PodNamespace its Kubernetes pod's; MetaFrom is the runtime's file
	// on the host they were read from. Empty when unknown (see AddNames).
	Name         string `json:"name,omitempty"`
	Image        string `json:"image,omitempty"`
	PodName      string `json:"pod_name,omitempty"`
	PodNamespace string `json:"pod_namespace,omitempty"`
	MetaFrom     string `json:"meta_from,omitempty"`
}

// ShortID is the ID's first 12 characters, as the runtimes' own listings
// print it.
func (c Container) ShortID() string {
	if len(c.ID) > 12 {
		return c.ID[:12]
	}
	return c.ID
}

// String names the container in a few words: "podman 0123456789ab",
// "containerd 0123456789ab pod 1234-abcd (burstable)", and with the names
// its runtime's files gave, "podman 0123456789ab name web image
// localhost/app:1", "containerd 0123456789ab name app pod shop/web-5d8f
// (burstable) image registry.example/app:v1".
func (c Container) String() string {
	s := c.Runtime
	if c.ID != "" {
		s += " " + c.ShortID()
	}
	if c.Name != "" {
		s += " name " + c.Name
	}
	switch {
	case c.PodName != "" && c.PodNamespace != "":
		s += " pod " + c.PodNamespace + "/" + c.PodName
	case c.PodName != "":
		s += " pod " + c.PodName
	case c.PodUID != "":
		s += " pod " + c.PodUID
	}
	if c.PodUID != "" && c.QoS != "" {
		s += " (" + c.QoS + ")"
	}
	if c.Image != "" {
		s += " image " + c.Image
	}
	return s
}

// containerPrefixes are the cgroup directory prefixes that name a
// container's runtime, followed by its ID.
var containerPrefixes = []struct{ prefix, runtime string }{
	{"docker-", RuntimeDocker},
	{"cri-containerd-", RuntimeContainerd},
	{"crio-", RuntimeCRIO},
	{"libpod-", RuntimePodman},
}

// ParseContainer names the container of a cgroup path
// ("/system.slice/docker-<id>.scope", "/libpod_parent/libpod-<id>",
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope");
// false when the path names none. The innermost container directory wins;
// a runtime's monitor beside it ("libpod-conmon-<id>") is not a container.
func ParseContainer(cgroup string) (Container, bool) {
	parts := strings.Split(cgroup, "/")
	var c Container
	found := false
	for i := len(parts) - 1; i >= 0 && !found; i-- {
		p := strings.TrimSuffix(parts[i], ".scope")
		for _, r := range containerPrefixes {
			if id, ok := strings.CutPrefix(p, r.prefix); ok && isHexID(id) {
				c = Container{Runtime: r.runtime, ID: id, Dir: parts[i]}
				found = true
				break
			}
		}
		if !found && isHexID(p) && i > 0 {
			switch parent := parts[i-1]; {
			case parent == "docker":
				c, found = Container{Runtime: RuntimeDocker, ID: p, Dir: parts[i]}, true
			case strings.HasPrefix(parent, "pod") || strings.Contains(parent, "kubepods"):
				c, found = Container{Runtime: RuntimeKubernetes, ID: p, Dir: parts[i]}, true
			}
		}
	}
	if strings.Contains(cgroup, "kubepods") {
		c.PodUID, c.QoS = podOf(parts)
		if !found && c.PodUID != "" {
			c.Runtime, c.Dir, found = RuntimeKubernetes, "pod"+c.PodUID, true
		}
	}
	if !found {
		return Container{}, false
	}
	c.Source = "cgroup"
	return c, true
}

// podOf finds a kubepods path's pod UID and QoS class: the systemd
// driver's "kubepods-burstable-pod<uid_with_underscores>.slice" or the
// cgroupfs driver's "/kubepods/burstable/pod<uid>"; a pod directly under
// kubepods is guaranteed.
func podOf(parts []string) (uid, qos string) {
	for i, p := range parts {
		q := strings.TrimSuffix(p, ".slice")
		j := strings.LastIndex(q, "pod")
		if j < 0 || len(q)-j <= 3 || (j > 0 && q[j-1] != '-') {
			continue
		}
		uid = strings.ReplaceAll(q[j+3:], "_", "-")
		qos = "guaranteed"
		for _, k := range []string{"burstable", "besteffort"} {
			if strings.Contains(q[:j], "-"+k+"-") || (i > 0 && parts[i-1] == k) {
				qos = k
			}
		}
		return uid, qos
	}
	return "", ""
}

func isHexID(s string) bool {
	if len(s) < 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseCgroupContainer names the container of a /proc/PID/cgroup file:
// the path cgroupPath picks first, then every other hierarchy's (on a
// hybrid host one v1 hierarchy may name the container while another
// does not).
func parseCgroupContainer(b []byte) (Container, bool) {
	if c, ok := ParseContainer(cgroupPath(b)); ok {
		return c, true
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if _, rest, ok := strings.Cut(line, ":"); ok {
			if _, path, ok := strings.Cut(rest, ":"); ok {
				if c, ok := ParseContainer(path); ok {
					return c, true
				}
			}
		}
	}
	return Container{}, false
}

// parseMountContainer names a container from /proc/PID/mountinfo where the
// cgroup path does not (gosleuth in a cgroup namespace, say): the file a
// runtime bind-mounts on the container's /etc/hostname lies in the
// runtime's per-container directory, under /var/lib/docker/containers/<id>
// or .../overlay-containers/<id>/userdata (podman, and cri-o for a pod's
// sandbox).
func parseMountContainer(b []byte) (Container, bool) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 5 || f[4] != "/etc/hostname" {
			continue
		}
		dirs := strings.Split(f[3], "/")
		for i := 1; i < len(dirs); i++ {
			if !isHexID(dirs[i]) {
				continue
			}
			switch dirs[i-1] {
			case "overlay-containers":
				return Container{Runtime: RuntimePodman, ID: dirs[i], Dir: f[3], Source: "mountinfo"}, true
			case "containers":
				if i > 1 && dirs[i-2] == "docker" {
					return Container{Runtime: RuntimeDocker, ID: dirs[i], Dir: f[3], Source: "mountinfo"}, true
				}
			}
		}
	}
	return Container{}, false
}

// Container names the container process pid runs in from its cgroup file,
// else its mountinfo, with the names its runtime's files on the host give
// (AddNames); false when neither names one (a process on the host, or a
// runtime this package does not know).
func (fs FS) Container(pid int) (Container, bool, error) {
	b, err := os.ReadFile(fs.PID(pid, "cgroup"))
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return Container{}, false, fmt.Errorf("read cgroup of process %d: %w", pid, ErrProcessGone)
		}
		return Container{}, false, fmt.Errorf("read cgroup of process %d: %w", pid, err)
	}
	c, ok := parseCgroupContainer(b)
	if !ok {
		if b, err := os.ReadFile(fs.PID(pid, "mountinfo")); err == nil {
			c, ok = parseMountContainer(b)
		}
	}
	if !ok {
		return Container{}, false, nil
	}
	c.AddNames()
	return c, true, nil
}

// NSPID returns process pid's PID in its own (innermost) PID namespace:
// the PID a containerised program knows itself by. It is pid for a process
// of fs's own namespace, and pid when the kernel has no NSpid line (before
// Linux 4.1).
func (fs FS) NSPID(pid int) (int, error) {
	b, err := os.ReadFile(fs.PID(pid, "status"))
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return 0, fmt.Errorf("read status of process %d: %w", pid, ErrProcessGone)
		}
		return 0, fmt.Errorf("read status of process %d: %w", pid, err)
	}
	if ns := parseNSpid(b); len(ns) > 0 {
		return ns[len(ns)-1], nil
	}
	return pid, nil
}
