package profileview

import (
	"bytes"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// Target is what a profile's output says of the profiled process beside
// its samples: the container it runs in (nil on the host) and its PID in
// its own PID namespace (0 when that is its PID here).
type Target struct {
	Container *proc.Container
	NSPID     int
}

// TargetOf reads pid's container and its PID in its own namespace through
// fs; what cannot be read is left out.
func TargetOf(fs proc.FS, pid int) Target {
	var t Target
	if c, ok, err := fs.Container(pid); err == nil && ok {
		t.Container = &c
	}
	if n, err := fs.NSPID(pid); err == nil && n != pid {
		t.NSPID = n
	}
	return t
}

// Line is the words naming the container and the PID inside, "" on the
// host: "container podman 0123456789ab name web image localhost/app:1,
// PID 1 in its namespace".
func (t Target) Line() string {
	s := ""
	if t.Container != nil {
		s = "container " + t.Container.String()
	}
	if t.NSPID > 0 {
		if s != "" {
			s += ", "
		}
		s += "PID " + strconv.Itoa(t.NSPID) + " in its namespace"
	}
	return s
}

// AddTargetLine puts t's line under the first line (the process's) of a
// report's text; the text is returned as it was for a process on the host.
func AddTargetLine(text []byte, t Target) []byte {
	l := t.Line()
	if l == "" {
		return text
	}
	out := make([]byte, 0, len(text)+len(l)+2)
	i := bytes.IndexByte(text, '\n') + 1
	if i == 0 && len(text) > 0 {
		text = append(text[:len(text):len(text)], '\n')
		i = len(text)
	}
	out = append(append(append(out, text[:i]...), l...), '\n')
	return append(out, text[i:]...)
}

// AnnotatePprof records t in a pprof profile: a comment naming the
// container and the PID inside (go tool pprof -comments shows it), and on
// every sample the labels container (its 12-digit ID) and container_image
// (where known), so profiles of several containers merged by pprof can be
// told apart with -tagfocus.
func AnnotatePprof(p *profile.Profile, t Target) {
	if l := t.Line(); l != "" {
		p.Comments = append(p.Comments, l)
	}
	c := t.Container
	if c == nil || c.ID == "" {
		return
	}
	labels := map[string]string{"container": c.ShortID()}
	if c.Image != "" {
		labels["container_image"] = c.Image
	}
	for _, s := range p.Sample {
		if s.Label == nil {
			s.Label = map[string][]string{}
		}
		for k, v := range labels {
			s.Label[k] = []string{v}
		}
	}
}
