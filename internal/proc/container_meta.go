package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// What a container's runtime writes about it on the host, where the names
// the kernel does not know (the image, the container's name, its pod's name
// and namespace) can be read without asking the runtime. Each runtime is
// looked up in its own files, found from the container's ID alone:
//
//   - containerd (Kubernetes): the OCI bundle it hands runc,
//     /run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json,
//     whose annotations name the image (io.kubernetes.cri.image-name), the
//     container, and the pod's name and namespace;
//   - cri-o: its bundle, /run/containers/storage/overlay-containers/<id>/userdata/config.json
//     (io.kubernetes.cri-o.ImageName, io.kubernetes.pod.name, ...);
//   - podman: its bundle's annotations carry no image (podman 4), so the
//     image and the container's name come from the container store's
//     record of it, /var/lib/containers/storage/overlay-containers/containers.json,
//     whose "metadata" string holds image-name and name (cri-o's record
//     there has them too, with pod-name);
//   - docker: /var/lib/docker/containers/<id>/config.v2.json (Name,
//     Config.Image).
//
// The files are read in gosleuth's own mount namespace, never through
// /proc/PID/root: a container controls its own root, not these. They are
// accepted only when they are regular files owned by root and writable by
// no one else, opened without following a symbolic link, and read up to a
// limit; a value with a character no runtime allows in a name is dropped.
// When nothing is found, nothing is said.

// metaRoot is the directory the runtimes' paths are looked up under: the
// root of gosleuth's own filesystem (tests point it at a fixture tree).
var metaRoot = "/"

// metaOwner is the owner a runtime's file must have: root, as the
// runtimes that run containers for other users write them.
var metaOwner = 0

const (
	maxBundleFile = 1 << 20  // an OCI config.json: a few kilobytes to tens
	maxStoreFile  = 32 << 20 // containers.json: about 500 bytes a container
)

// Paths of the runtimes' files, relative to metaRoot; %s is the ID.
const (
	containerdBundle = "run/containerd/io.containerd.runtime.v2.task/k8s.io/%s/config.json"
	crioBundle       = "run/containers/storage/overlay-containers/%s/userdata/config.json"
	podmanBundle     = "var/lib/containers/storage/overlay-containers/%s/userdata/config.json"
	containersStore  = "var/lib/containers/storage/overlay-containers/containers.json"
	dockerConfig     = "var/lib/docker/containers/%s/config.v2.json"
)

// containerNames is what a runtime's file says of a container.
type containerNames struct {
	Name, Image, PodName, PodNamespace string
}

func (n containerNames) empty() bool { return n == containerNames{} }

// metaLookup is one file to look in and its parser.
type metaLookup struct {
	path  string // relative to metaRoot, %s the ID
	limit int64
	parse func(b []byte, id string) containerNames
}

var (
	bundleLookup = func(p string) metaLookup { return metaLookup{p, maxBundleFile, parseBundleNames} }
	storeLookup  = metaLookup{containersStore, maxStoreFile, parseStoreNames}
)

// metaLookups lists, by runtime, the files that may name its containers,
// the most specific first.
var metaLookups = map[string][]metaLookup{
	RuntimeContainerd: {bundleLookup(containerdBundle)},
	RuntimeCRIO:       {bundleLookup(crioBundle), storeLookup},
	RuntimePodman:     {bundleLookup(podmanBundle), storeLookup},
	RuntimeDocker:     {{dockerConfig, maxBundleFile, parseDockerNames}},
	// The kubelet's cgroupfs driver does not say which runtime: either.
	RuntimeKubernetes: {bundleLookup(containerdBundle), bundleLookup(crioBundle), storeLookup},
}

// AddNames fills c's Name, Image, PodName and PodNamespace from its
// runtime's files on the host (see the list above), and MetaFrom with the
// file they came from. It reports whether any was found; a container
// without an ID, or whose runtime left nothing readable, keeps them empty.
func (c *Container) AddNames() bool {
	if !isHexID(c.ID) {
		return false
	}
	for _, l := range metaLookups[c.Runtime] {
		path := filepath.Join(metaRoot, strings.ReplaceAll(l.path, "%s", c.ID))
		b, err := readRuntimeFile(path, l.limit)
		if err != nil {
			continue
		}
		if n := l.parse(b, c.ID); !n.empty() {
			c.Name, c.Image, c.PodName, c.PodNamespace = n.Name, n.Image, n.PodName, n.PodNamespace
			c.MetaFrom = path
			return true
		}
	}
	return false
}

// readRuntimeFile reads path if it is a regular file owned by metaOwner
// that nobody else may write, of at most limit bytes; a symbolic link in
// its last element is not followed, and a FIFO does not block the open.
func readRuntimeFile(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s: %w", path, errors.New("not a regular file"))
	case int(st.Uid) != metaOwner || st.Mode&0o022 != 0:
		return nil, fmt.Errorf("%s: %w", path, errors.New("not the runtime's: owned by another user or writable by others"))
	case st.Size > limit:
		return nil, fmt.Errorf("%s: %w", path, fmt.Errorf("%d bytes, more than %d", st.Size, limit))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w", path, fmt.Errorf("more than %d bytes", limit))
	}
	return b, nil
}

// Annotations of the OCI bundles that name a container, by runtime.
var (
	imageKeys     = []string{"io.kubernetes.cri.image-name", "io.kubernetes.cri-o.ImageName", "org.opencontainers.image.ref.name"}
	nameKeys      = []string{"io.kubernetes.cri.container-name", "io.kubernetes.container.name"}
	podKeys       = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	namespaceKeys = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
)

// parseBundleNames reads the names an OCI bundle's config.json carries
// in its annotations.
func parseBundleNames(b []byte, _ string) containerNames {
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &spec) != nil {
		return containerNames{}
	}
	first := func(keys []string, ok func(string) bool) string {
		for _, k := range keys {
			if v := spec.Annotations[k]; ok(v) {
				return v
			}
		}
		return ""
	}
	return containerNames{
		Image:        first(imageKeys, isImageRef),
		Name:         first(nameKeys, isName),
		PodName:      first(podKeys, isName),
		PodNamespace: first(namespaceKeys, isName),
	}
}

// parseStoreNames finds container id in a containers/storage
// containers.json (podman's and cri-o's store) and reads the names its
// "metadata" string holds, or else its first name.
func parseStoreNames(b []byte, id string) containerNames {
	var store []struct {
		ID       string   `json:"id"`
		Names    []string `json:"names"`
		Metadata string   `json:"metadata"`
	}
	if json.Unmarshal(b, &store) != nil {
		return containerNames{}
	}
	for _, c := range store {
		if c.ID != id {
			continue
		}
		var m struct {
			Image     string `json:"image-name"`
			Name      string `json:"name"`
			PodName   string `json:"pod-name"`
			Namespace string `json:"namespace"`
		}
		json.Unmarshal([]byte(c.Metadata), &m)
		if m.Name == "" && len(c.Names) > 0 {
			m.Name = c.Names[0]
		}
		n := containerNames{Image: keep(m.Image, isImageRef), Name: keep(m.Name, isName), PodName: keep(m.PodName, isName)}
		if n.PodName != "" {
			n.PodNamespace = keep(m.Namespace, isName)
		}
		return n
	}
	return containerNames{}
}

// parseDockerNames reads docker's config.v2.json: the container's name
// ("/web") and the image as it was asked for.
func parseDockerNames(b []byte, id string) containerNames {
	var c struct {
		ID     string `json:"ID"`
		Name   string `json:"Name"`
		Config struct {
			Image string `json:"Image"`
		} `json:"Config"`
	}
	if json.Unmarshal(b, &c) != nil || (c.ID != "" && c.ID != id) {
		return containerNames{}
	}
	return containerNames{Name: keep(strings.TrimPrefix(c.Name, "/"), isName), Image: keep(c.Config.Image, isImageRef)}
}

func keep(s string, ok func(string) bool) string {
	if ok(s) {
		return s
	}
	return ""
}

// isName accepts what the runtimes and Kubernetes allow in a container's,
// pod's or namespace's name: letters, digits, '.', '_' and '-', at most
// 253 characters.
func isName(s string) bool { return validChars(s, 253, "._-") }

// isImageRef accepts an image reference's characters
// ("registry:5000/team/app:v1.2@sha256:..."), at most 512.
func isImageRef(s string) bool { return validChars(s, 512, "._-/:@+") }

func validChars(s string, max int, extra string) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}
