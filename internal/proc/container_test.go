package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseContainer(t *testing.T) {
	const id = "3f2b8a0c1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	const real = "ed94a9f30d54ddbceffbcd03163966df878a2887f82ffc9cee52ff87dc668e1f"
	const pod = "7a1c9e2f-4b3d-4e8a-9c1f-2d5e6f7a8b9c"
	tests := []struct {
		file string
		want Container
		ok   bool
		text string
	}{
		{"podman-runc-cgroupfs-hybrid.cgroup", Container{Runtime: RuntimePodman, ID: real, Dir: "libpod-" + real, Source: "cgroup"}, true, "podman ed94a9f30d54"},
		{"podman-rootless-systemd-v2.cgroup", Container{Runtime: RuntimePodman, ID: id, Dir: "libpod-" + id + ".scope", Source: "cgroup"}, true, "podman 3f2b8a0c1d4e"},
		{"podman-seen-from-cgroupns.cgroup", Container{Runtime: RuntimePodman, ID: id, Dir: "libpod-" + id, Source: "cgroup"}, true, "podman 3f2b8a0c1d4e"},
		{"podman-conmon-v2.cgroup", Container{}, false, ""},
		{"docker-systemd-v2.cgroup", Container{Runtime: RuntimeDocker, ID: id, Dir: "docker-" + id + ".scope", Source: "cgroup"}, true, "docker 3f2b8a0c1d4e"},
		{"docker-cgroupfs-v1.cgroup", Container{Runtime: RuntimeDocker, ID: id, Dir: id, Source: "cgroup"}, true, "docker 3f2b8a0c1d4e"},
		{"containerd-k8s-systemd-v2.cgroup", Container{Runtime: RuntimeContainerd, ID: id, PodUID: pod, QoS: "burstable", Dir: "cri-containerd-" + id + ".scope", Source: "cgroup"}, true,
			"containerd 3f2b8a0c1d4e pod " + pod + " (burstable)"},
		{"crio-k8s-guaranteed-v2.cgroup", Container{Runtime: RuntimeCRIO, ID: id, PodUID: pod, QoS: "guaranteed", Dir: "crio-" + id + ".scope", Source: "cgroup"}, true,
			"cri-o 3f2b8a0c1d4e pod " + pod + " (guaranteed)"},
		// conmon runs in the pod's cgroup, beside the container: the pod only.
		{"crio-conmon-v2.cgroup", Container{Runtime: RuntimeKubernetes, PodUID: pod, QoS: "guaranteed", Dir: "pod" + pod, Source: "cgroup"}, true, "kubernetes pod " + pod + " (guaranteed)"},
		{"k8s-cgroupfs-v1.cgroup", Container{Runtime: RuntimeKubernetes, ID: id, PodUID: pod, QoS: "besteffort", Dir: id, Source: "cgroup"}, true,
			"kubernetes 3f2b8a0c1d4e pod " + pod + " (besteffort)"},
		{"systemd-user-slice-v2.cgroup", Container{}, false, ""},
		{"systemd-service-v2.cgroup", Container{}, false, ""},
		{"host-root-session.cgroup", Container{}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata/container", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := parseCgroupContainer(b)
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tt.want, tt.ok)
			}
			if ok && got.String() != tt.text {
				t.Errorf("String() = %q, want %q", got.String(), tt.text)
			}
		})
	}
}

func TestParseContainerEdges(t *testing.T) {
	for _, cg := range []string{"", "/", "/docker/nothex", "/system.slice/docker-0123.scope", "/kubepods.slice",
		"/kubepods/burstable/pod", "/libpod_parent/libpod-" + strings.Repeat("g", 64)} {
		if c, ok := ParseContainer(cg); ok {
			t.Errorf("ParseContainer(%q) = %+v, want none", cg, c)
		}
	}
}

func TestParseMountContainer(t *testing.T) {
	for _, tt := range []struct {
		file, runtime, short string
	}{
		{"podman-runc-cgroupfs.mountinfo", RuntimePodman, "ed94a9f30d54"},
		{"docker.mountinfo", RuntimeDocker, "3f2b8a0c1d4e"},
	} {
		b, err := os.ReadFile(filepath.Join("testdata/container", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		c, ok := parseMountContainer(b)
		if !ok || c.Runtime != tt.runtime || c.ShortID() != tt.short || c.Source != "mountinfo" {
			t.Errorf("%s: %+v %v, want %s %s from mountinfo", tt.file, c, ok, tt.runtime, tt.short)
		}
	}
	if c, ok := parseMountContainer([]byte("22 1 0:21 / /proc rw - proc proc rw\n")); ok {
		t.Errorf("a host's mounts: %+v", c)
	}
}

// TestContainerOfSelf: this process's own container, read through the
// FS: none on a host (the test's normal place), and no error either way.
func TestContainerOfSelf(t *testing.T) {
	c, ok, err := NewFS("").Container(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this test runs in container %v: %+v", ok, c)
	if _, _, err := NewFS("").Container(1 << 30); err == nil {
		t.Error("a PID that does not exist gave no error")
	}
}

// metaTree installs fixture files of testdata/container/meta at paths
// (relative to a new root, %s the ID) as root's runtime would leave them
// (mode 0644, owned by this test's user, who stands for root), and points
// AddNames at the tree.
func metaTree(t *testing.T, id string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for path, fixture := range files {
		p := filepath.Join(root, strings.ReplaceAll(path, "%s", id))
		b, err := os.ReadFile(filepath.Join("testdata/container/meta", fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644) // whatever the umask
	}
	oldRoot, oldOwner := metaRoot, metaOwner
	metaRoot, metaOwner = root, os.Getuid()
	t.Cleanup(func() { metaRoot, metaOwner = oldRoot, oldOwner })
	return root
}

// TestAddNames reads each runtime's files as they lie on a host: podman's
// were captured from podman 4.3 here (its bundle names no image, its store
// does), the others are written from the runtimes' documented annotations
// and records.
func TestAddNames(t *testing.T) {
	const id = "3f2b8a0c1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	const podmanID = "50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7"
	k8s := Container{Name: "app", Image: "registry.example/shop/app:v1.4.2", PodName: "web-5d8f7c9b4-x2kqp", PodNamespace: "shop"}
	tests := []struct {
		name, runtime, id string
		files             map[string]string
		want              Container // the names and MetaFrom (relative)
		text              string
	}{
		{"podman", RuntimePodman, podmanID, map[string]string{podmanBundle: "podman-bundle-config.json", containersStore: "podman-containers.json"},
			Container{Name: "ptestc", Image: "localhost/ptest:1", MetaFrom: containersStore}, "podman 50e67bc3a90c name ptestc image localhost/ptest:1"},
		{"podman without its store", RuntimePodman, podmanID, map[string]string{podmanBundle: "podman-bundle-config.json"}, Container{}, "podman 50e67bc3a90c"},
		{"podman, another container's store", RuntimePodman, id, map[string]string{containersStore: "podman-containers.json"}, Container{}, "podman 3f2b8a0c1d4e"},
		{"containerd", RuntimeContainerd, id, map[string]string{containerdBundle: "containerd-k8s-bundle-config.json"},
			withFrom(k8s, containerdBundle), "containerd 3f2b8a0c1d4e name app pod shop/web-5d8f7c9b4-x2kqp image registry.example/shop/app:v1.4.2"},
		{"cri-o", RuntimeCRIO, id, map[string]string{crioBundle: "crio-k8s-bundle-config.json"},
			withFrom(k8s, crioBundle), "cri-o 3f2b8a0c1d4e name app pod shop/web-5d8f7c9b4-x2kqp image registry.example/shop/app:v1.4.2"},
		{"kubelet cgroupfs, containerd's bundle", RuntimeKubernetes, id, map[string]string{containerdBundle: "containerd-k8s-bundle-config.json"},
			withFrom(k8s, containerdBundle), "kubernetes 3f2b8a0c1d4e name app pod shop/web-5d8f7c9b4-x2kqp image registry.example/shop/app:v1.4.2"},
		{"docker", RuntimeDocker, id, map[string]string{dockerConfig: "docker-config.v2.json"},
			Container{Name: "shop-app", Image: "registry.example/shop/app:v1.4.2", MetaFrom: dockerConfig}, "docker 3f2b8a0c1d4e name shop-app image registry.example/shop/app:v1.4.2"},
		{"docker's file under another ID", RuntimeDocker, podmanID, map[string]string{dockerConfig: "docker-config.v2.json"}, Container{}, "docker 50e67bc3a90c"},
		{"containerd's file for cri-o", RuntimeCRIO, id, map[string]string{containerdBundle: "containerd-k8s-bundle-config.json"}, Container{}, "cri-o 3f2b8a0c1d4e"},
		// Escapes, spaces and path elements in a value: dropped, not shown.
		{"hostile annotations", RuntimeContainerd, id, map[string]string{containerdBundle: "hostile-bundle-config.json"}, Container{}, "containerd 3f2b8a0c1d4e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := metaTree(t, tt.id, tt.files)
			c := Container{Runtime: tt.runtime, ID: tt.id}
			ok := c.AddNames()
			want := tt.want
			if want.MetaFrom != "" {
				want.MetaFrom = filepath.Join(root, strings.ReplaceAll(want.MetaFrom, "%s", tt.id))
			}
			want.Runtime, want.ID = tt.runtime, tt.id
			if c != want || ok != (tt.want.MetaFrom != "") {
				t.Errorf("got %+v %v, want %+v", c, ok, want)
			}
			if c.String() != tt.text {
				t.Errorf("String() = %q, want %q", c.String(), tt.text)
			}
		})
	}
}

func withFrom(c Container, from string) Container {
	c.MetaFrom = from
	return c
}

// TestAddNamesRefuses: a runtime's file is read only as the runtime
// leaves it; anything else says nothing and never blocks.
func TestAddNamesRefuses(t *testing.T) {
	const id = "3f2b8a0c1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
	path := func(root string) string { return filepath.Join(root, strings.ReplaceAll(containerdBundle, "%s", id)) }
	tests := []struct {
		name  string
		spoil func(t *testing.T, p string)
	}{
		{"writable by others", func(t *testing.T, p string) { os.Chmod(p, 0o666) }},
		{"writable by its group", func(t *testing.T, p string) { os.Chmod(p, 0o664) }},
		{"a symbolic link", func(t *testing.T, p string) {
			real := p + ".real"
			if err := os.Rename(p, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, p); err != nil {
				t.Fatal(err)
			}
		}},
		{"a FIFO", func(t *testing.T, p string) {
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory", func(t *testing.T, p string) {
			os.Remove(p)
			os.Mkdir(p, 0o755)
		}},
		{"too large", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			pad := fmt.Sprintf(`{"pad":"%s",`, strings.Repeat("x", maxBundleFile))
			os.WriteFile(p, append([]byte(pad), b[1:]...), 0o644)
		}},
		{"another user's", func(t *testing.T, p string) {
			if os.Getuid() != 0 {
				metaOwner = os.Getuid() + 1 // the file is then not the owner's
				return
			}
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := metaTree(t, id, map[string]string{containerdBundle: "containerd-k8s-bundle-config.json"})
			c := Container{Runtime: RuntimeContainerd, ID: id}
			if !c.AddNames() {
				t.Fatal("the file as the runtime leaves it was not read")
			}
			tt.spoil(t, path(root))
			c = Container{Runtime: RuntimeContainerd, ID: id}
			if c.AddNames() || c.Image != "" {
				t.Errorf("read names from a file that is %s: %+v", tt.name, c)
			}
		})
	}
	c := Container{Runtime: RuntimeContainerd, ID: "../../etc"}
	if c.AddNames() {
		t.Errorf("a path for an ID that is not one: %+v", c)
	}
}

// TestNSPID: this process's PID in its own namespace, read through the FS.
func TestNSPID(t *testing.T) {
	n, err := NewFS("").NSPID(os.Getpid())
	if err != nil || n <= 0 {
		t.Fatalf("NSPID of this process: %d %v", n, err)
	}
	if _, err := NewFS("").NSPID(1 << 30); err == nil {
		t.Error("a PID that does not exist gave no error")
	}
}

// FuzzContainer: cgroup paths are the kernel's, but their names are any
// container runtime's or user's (a user may create cgroups under its
// delegated slice); the runtimes' files are root's, but their values
// (image and pod names) are whoever started the container: no input may
// panic, an ID found is a hex ID of the input, and a name found is one of
// its strings' and holds no character outside a name's.
func FuzzContainer(f *testing.F) {
	files, _ := filepath.Glob("testdata/container/*")
	meta, _ := filepath.Glob("testdata/container/meta/*")
	for _, p := range append(files, meta...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("0::/kubepods-pod.slice/pod/-pod_"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte) (Container, bool){parseCgroupContainer, parseMountContainer} {
			c, ok := parse(b)
			if ok && c.ID != "" && (!isHexID(c.ID) || !strings.Contains(string(b), c.ID)) {
				t.Fatalf("ID %q from %q", c.ID, b)
			}
			_ = c.String()
		}
		const id = "50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7"
		for _, parse := range []func([]byte, string) containerNames{parseBundleNames, parseStoreNames, parseDockerNames} {
			n := parse(b, id)
			for _, v := range []string{n.Name, n.Image, n.PodName, n.PodNamespace} {
				if v != "" && (!isImageRef(v) || strings.ContainsAny(v, " \x00\x1b\n")) {
					t.Fatalf("name %q from %q", v, b)
				}
			}
		}
	})
}

func TestStatusInts(t *testing.T) {
	for _, tt := range []struct {
		in, key string
		want    []int
	}{
		{"Name:\tsleeper\nNSpid:\t27501\t1\nNSpgid:\t27501\t1\n", "NSpid:", []int{27501, 1}},
		{"NSpid:\t42\n", "NSpid:", []int{42}},
		{"Pid:\t7\nNSpid:\t7\n", "Pid:", []int{7}},
		{"NSpid:\t42\tx\n", "NSpid:", nil},
		{"NSpid:\t-1\n", "NSpid:", nil},
		{"Name:\tx\n", "NSpid:", nil},
		{"", "Pid:", nil},
	} {
		if got := statusInts([]byte(tt.in), tt.key); !slices.Equal(got, tt.want) {
			t.Errorf("statusInts(%q, %q) = %v, want %v", tt.in, tt.key, got, tt.want)
		}
	}
}
