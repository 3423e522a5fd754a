package profileview

import (
	"bytes"
	"slices"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/golden"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// TestSummaryGolden pins the profile summary's text and JSON for a summary
// built in the test (one function name carries an escape sequence, as a
// hostile binary's may), of a process on the host and of the same process
// in a container whose runtime's files named it.
func TestSummaryGolden(t *testing.T) {
	procCPU, user, sys, cov := 2.9, 1.9, 1.0, 1.03
	s := &stacks.Summary{PID: 4242, Exe: "/usr/local/bin/svc", Seconds: 30, Hz: 99, Samples: 2970, Lost: 3, Threads: 9,
		NewThreads: 2, PickupMaxMS: 0.4, SampledCPU: 3.0, ProcCPU: &procCPU, ProcUser: &user, ProcSystem: &sys, Coverage: &cov,
		KernelShare: 0.34, UserShare: 0.41, Classes: map[string]float64{"user": 0.41, "syscall": 0.3, "gc background marking": 0.2, "scheduler": 0.09},
		Top:              []stacks.TopFunc{{Function: "crypto/sha256.blockSHANI", FlatShare: 0.22, CumShare: 0.22}, {Function: "evil\x1b]0;x\x07", FlatShare: 0.01, CumShare: 0.01}},
		TopCum:           []stacks.TopFunc{{Function: "main.handle", FlatShare: 0.02, CumShare: 0.61}},
		LeafCallersFixed: 12, GoFrames: 9000, GoFramesUnresolved: 0, Notes: []string{"kernel mode was sampled"}}
	for _, tt := range []struct {
		name   string
		target Target
	}{
		{"summary", Target{}},
		{"summary-container", Target{Container: &testContainer, NSPID: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var text, js bytes.Buffer
			if err := WriteSummaryText(&text, s, tt.target); err != nil {
				t.Fatal(err)
			}
			if err := WriteSummaryJSON(&js, s, tt.target); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tt.name+".txt", text.Bytes())
			golden.Check(t, tt.name+".json", js.Bytes())
		})
	}
}

var testContainer = proc.Container{Runtime: proc.RuntimePodman, ID: "50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7",
	Dir: "libpod-50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7", Source: "cgroup", Name: "ptestc", Image: "localhost/ptest:1",
	MetaFrom: "/var/lib/containers/storage/overlay-containers/containers.json"}

// TestAnnotatePprof: the container is a comment of the pprof profile and
// a label of every sample; a process on the host changes nothing.
func TestAnnotatePprof(t *testing.T) {
	newProfile := func() *profile.Profile {
		return &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}}, Sample: []*profile.Sample{{Value: []int64{1}}, {Value: []int64{2}, Label: map[string][]string{"mode": {"offcpu"}}}}}
	}
	p := newProfile()
	AnnotatePprof(p, Target{Container: &testContainer, NSPID: 1})
	if want := []string{"container podman 50e67bc3a90c name ptestc image localhost/ptest:1, PID 1 in its namespace"}; !slices.Equal(p.Comments, want) {
		t.Errorf("comments %q, want %q", p.Comments, want)
	}
	for i, s := range p.Sample {
		if !slices.Equal(s.Label["container"], []string{"50e67bc3a90c"}) || !slices.Equal(s.Label["container_image"], []string{"localhost/ptest:1"}) {
			t.Errorf("sample %d labels %v", i, s.Label)
		}
	}
	if p.Sample[1].Label["mode"][0] != "offcpu" {
		t.Errorf("the sample's own label was lost: %v", p.Sample[1].Label)
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := profile.Parse(&b); err != nil {
		t.Errorf("the annotated profile does not parse: %v", err)
	}
	host := newProfile()
	AnnotatePprof(host, Target{})
	if len(host.Comments) != 0 || host.Sample[0].Label != nil {
		t.Errorf("a process on the host: comments %q, labels %v", host.Comments, host.Sample[0].Label)
	}
}

// TestAddTargetLine: the container's line goes under the process's line
// of another report's text, and nothing changes on the host.
func TestAddTargetLine(t *testing.T) {
	in := "pid 4242  /svc  go1.26.8\nlive heap\n"
	c := Target{Container: &testContainer, NSPID: 1}
	want := "pid 4242  /svc  go1.26.8\ncontainer podman 50e67bc3a90c name ptestc image localhost/ptest:1, PID 1 in its namespace\nlive heap\n"
	for _, tt := range []struct {
		in   string
		t    Target
		want string
	}{
		{in, c, want},
		{in, Target{}, in},
		{"pid 4242", c, "pid 4242\ncontainer podman 50e67bc3a90c name ptestc image localhost/ptest:1, PID 1 in its namespace\n"},
		{"", Target{NSPID: 7}, "PID 7 in its namespace\n"},
	} {
		if got := string(AddTargetLine([]byte(tt.in), tt.t)); got != tt.want {
			t.Errorf("AddTargetLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
