// Package deploy holds the offline checks of the image's Kubernetes
// manifest and systemd unit: no cluster is needed, so they run in every
// test run. The manifests themselves are data beside this file.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gosleuth/gosleuth/internal/testbin"
)

// object is the part of a Kubernetes object the manifest uses; decoding
// with known fields only makes a misspelt field (readOnlyRootFileSystem)
// fail here instead of being ignored by the cluster.
type object struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   metadata `yaml:"metadata"`
	Spec       *struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		UpdateStrategy struct {
			Type string `yaml:"type"`
		} `yaml:"updateStrategy"`
		Template struct {
			Metadata metadata `yaml:"metadata"`
			Spec     podSpec  `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type metadata struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type podSpec struct {
	HostPID                      bool `yaml:"hostPID"`
	AutomountServiceAccountToken bool `yaml:"automountServiceAccountToken"`
	EnableServiceLinks           bool `yaml:"enableServiceLinks"`
	Tolerations                  []struct {
		Operator string `yaml:"operator"`
	} `yaml:"tolerations"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name     string `yaml:"name"`
		HostPath struct {
			Path string `yaml:"path"`
		} `yaml:"hostPath"`
	} `yaml:"volumes"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	SecurityContext struct {
		RunAsUser                int  `yaml:"runAsUser"`
		RunAsNonRoot             bool `yaml:"runAsNonRoot"`
		Privileged               bool `yaml:"privileged"`
		AllowPrivilegeEscalation bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
			Add  []string `yaml:"add"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	PeriodSeconds int `yaml:"periodSeconds"`
}

// tableCaps returns the capabilities of command's row in the table of
// docs/containers.md.
func tableCaps(t *testing.T, command string) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/containers.md")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		cells := strings.Split(l, "|")
		if len(cells) > 3 && strings.TrimSpace(cells[1]) == "`"+command+"`" {
			var caps []string
			for _, c := range strings.Split(cells[2], ",") {
				caps = append(caps, strings.TrimSpace(c))
			}
			slices.Sort(caps)
			return caps
		}
	}
	t.Fatalf("docs/containers.md has no row for %s", command)
	return nil
}

// exporterFlags lists the flags gosleuth exporter takes, from its help.
func exporterFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := testbin.Build(t, "../cmd/gosleuth")
	out, err := exec.Command(bin, "exporter", "--help").Output()
	if err != nil {
		t.Fatalf("gosleuth exporter --help: %v", err)
	}
	flags := map[string]bool{}
	for l := range strings.Lines(string(out)) {
		if f, ok := strings.CutPrefix(strings.TrimSpace(l), "-"); ok && !strings.HasPrefix(f, "-") {
			flags["--"+strings.Fields(f)[0]] = true
		}
	}
	if !flags["--listen"] || !flags["--proc"] {
		t.Fatalf("no --listen or --proc among the exporter's flags %v", flags)
	}
	return flags
}

// checkArgs checks that every flag in args is one of the exporter's and
// returns the flags' values.
func checkArgs(t *testing.T, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	vals := map[string]string{}
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "-") {
			continue
		}
		name, val, ok := strings.Cut(args[i], "=")
		if !flags[name] {
			t.Errorf("flag %s is not one of gosleuth exporter's", name)
		}
		if !ok && i+1 < len(args) {
			i++
			val = args[i]
		}
		vals[name] = val
	}
	return vals
}

// daemonSet decodes deploy/kubernetes/exporter.yaml with known fields
// only and returns its DaemonSet, failing t unless there is a Namespace
// and a DaemonSet with one container.
func daemonSet(t *testing.T) *object {
	t.Helper()
	b, err := os.ReadFile("kubernetes/exporter.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var ds *object
	kinds := map[string]bool{}
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("exporter.yaml: %v", err)
		}
		kinds[o.Kind] = true
		if o.Kind == "DaemonSet" {
			if o.APIVersion != "apps/v1" || o.Spec == nil {
				t.Fatalf("DaemonSet: apiVersion %q, spec %v", o.APIVersion, o.Spec != nil)
			}
			ds = &o
		}
	}
	if !kinds["Namespace"] || ds == nil || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("kinds %v: want a Namespace and a DaemonSet of one container", kinds)
	}
	return ds
}

// TestExporterManifest checks the DaemonSet against what the exporter
// needs and what the docs say.
func TestExporterManifest(t *testing.T) {
	ds := daemonSet(t)
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod's labels", k, v)
		}
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID || pod.AutomountServiceAccountToken || len(pod.Containers) != 1 {
		t.Fatalf("hostPID %v, service account token %v, %d containers", pod.HostPID, pod.AutomountServiceAccountToken, len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc.Privileged || sc.AllowPrivilegeEscalation || !sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("security context %+v: want unprivileged, no escalation, read-only root, every capability dropped", sc)
	}
	add := slices.Clone(sc.Capabilities.Add)
	for i := range add {
		add[i] = "CAP_" + add[i]
	}
	slices.Sort(add)
	if want := tableCaps(t, "exporter"); !slices.Equal(add, prefixed(want)) {
		t.Errorf("capabilities added %v, the exporter's row in docs/containers.md %v", add, want)
	}
	if len(c.Args) == 0 || c.Args[0] != "exporter" {
		t.Fatalf("args %q: want the exporter", c.Args)
	}
	vals := checkArgs(t, c.Args[1:], exporterFlags(t))
	_, port, _ := strings.Cut(vals["--listen"], ":")
	a := ds.Spec.Template.Metadata.Annotations
	if len(c.Ports) != 1 || strconv.Itoa(c.Ports[0].ContainerPort) != port || a["prometheus.io/port"] != port ||
		a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("listens on %q, ports %+v, annotations %v: want one port, scraped at /metrics", vals["--listen"], c.Ports, a)
	}
	for _, p := range []probe{c.ReadinessProbe, c.LivenessProbe} {
		if p.HTTPGet.Port != c.Ports[0].Name {
			t.Errorf("probe on port %q, not the container's %q", p.HTTPGet.Port, c.Ports[0].Name)
		}
	}
	// Every mount has its volume; the --proc root is the host's /proc,
	// read-only.
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		hostPaths[v.Name] = v.HostPath.Path
	}
	var procMounted bool
	for _, m := range c.VolumeMounts {
		hp, ok := hostPaths[m.Name]
		if !ok || !m.ReadOnly {
			t.Errorf("mount %+v: volume found %v, read-only %v", m, ok, m.ReadOnly)
		}
		procMounted = procMounted || (m.MountPath == vals["--proc"] && hp == "/proc")
	}
	if !procMounted {
		t.Errorf("--proc %q is not the host's /proc mounted", vals["--proc"])
	}
}

func prefixed(caps []string) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = "CAP_" + c
	}
	return out
}

// TestSystemdUnit checks deploy/systemd/gosleuth-exporter.service: its
// flags are the exporter's, and its ambient and bounding capabilities are
// the exporter's row of the table.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("systemd/gosleuth-exporter.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for l := range strings.Lines(string(b)) {
		l = strings.TrimSpace(l)
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys[k] = v
		}
	}
	start := strings.Fields(keys["ExecStart"])
	if len(start) < 2 || start[1] != "exporter" {
		t.Fatalf("ExecStart %q: want gosleuth exporter", keys["ExecStart"])
	}
	checkArgs(t, start[2:], exporterFlags(t))
	want := prefixed(tableCaps(t, "exporter"))
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		got := strings.Fields(keys[k])
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s %v, the exporter's row in docs/containers.md %v", k, got, want)
		}
	}
}
