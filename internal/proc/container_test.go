package proc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// FuzzContainer: cgroup paths are the kernel's, but their names are any
// container runtime's or user's (a user may create cgroups under its
// delegated slice): no input may panic, and an ID found is a hex ID of the
// input.
func FuzzContainer(f *testing.F) {
	files, _ := filepath.Glob("testdata/container/*")
	for _, p := range files {
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
