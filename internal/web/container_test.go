package web

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// testContainer is a podman container as the cgroup path and podman's
// store name it.
var testContainer = proc.Container{Runtime: proc.RuntimePodman, ID: "50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7",
	Dir: "libpod-50e67bc3a90c0b5a20d7a1e5935bd8c182f62ec35eb2b7f789469da988753bf7", Source: "cgroup", Name: "ptestc", Image: "localhost/ptest:1",
	MetaFrom: "/var/lib/containers/storage/overlay-containers/containers.json"}

// watchAs gives the dashboard a watch of pid whose facts say it runs in
// container c with PID nspid inside (nil and 0: on the host), as
// goruntime.Discover finds a containerised process (deploy's tests show
// the real one, in podman).
func watchAs(t *testing.T, s *Server, pid int, c *proc.Container, nspid int) {
	t.Helper()
	f, err := goruntime.Discover("", pid)
	if err != nil {
		t.Fatal(err)
	}
	id, err := proc.ReadIdentity("", pid)
	if err != nil {
		t.Fatal(err)
	}
	f.Container, f.NSPID = c, nspid
	if nspid == 0 {
		f.NSPID = pid
	}
	s.mu.Lock()
	s.watches[pid] = newWatch(s, pid, id, f)
	s.mu.Unlock()
}

// TestProcessContainer: the process page's state names the container
// (the object every command's JSON carries and the words their text
// uses) and the program's PID inside its namespace; a process on the host
// has neither.
func TestProcessContainer(t *testing.T) {
	testenv.Require(t, testenv.Linux)
	s, ts := newTestServer(t, Config{Interval: 200 * time.Millisecond, Linger: 50 * time.Millisecond})
	for _, tt := range []struct {
		name      string
		container *proc.Container
		nspid     int
		text      string
	}{
		{"container", &testContainer, 1, "podman 50e67bc3a90c name ptestc image localhost/ptest:1"},
		{"host", nil, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pid := startPatient(t, nil).Process.Pid
			watchAs(t, s, pid, tt.container, tt.nspid)
			var h struct {
				State struct {
					PID           int             `json:"pid"`
					NSPID         *int            `json:"nspid"`
					Container     *proc.Container `json:"container"`
					ContainerText string          `json:"container_text"`
				} `json:"state"`
			}
			getJSON(t, ts.Client(), ts.URL+"/api/history?pid="+strconv.Itoa(pid), &h)
			st := h.State
			if st.PID != pid || st.ContainerText != tt.text {
				t.Errorf("state pid %d container %q, want %d %q", st.PID, st.ContainerText, pid, tt.text)
			}
			if (st.Container == nil) != (tt.container == nil) || (st.Container != nil && *st.Container != *tt.container) {
				t.Errorf("container %+v, want %+v", st.Container, tt.container)
			}
			if (st.NSPID == nil) != (tt.nspid == 0) || (st.NSPID != nil && *st.NSPID != tt.nspid) {
				t.Errorf("nspid %v, want %d (absent when 0)", st.NSPID, tt.nspid)
			}
		})
	}
}

// TestBrowserProcessContainer: the process page shows the container and
// the PID inside beside the command line, and nothing there for a
// process on the host.
func TestBrowserProcessContainer(t *testing.T) {
	testenv.Require(t, testenv.Linux, testenv.Chromium)
	ctx := browser(t)
	s, ts := newTestServer(t, Config{Interval: 500 * time.Millisecond})
	inside := startPatient(t, nil).Process.Pid
	host := startPatient(t, nil).Process.Pid
	watchAs(t, s, inside, &testContainer, 1)
	watchAs(t, s, host, nil, 0)
	pw := watchPage(t, ctx, ts.URL)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, tt := range []struct {
		pid  int
		want string
	}{
		{inside, "container podman 50e67bc3a90c name ptestc image localhost/ptest:1, PID 1 in its namespace"},
		{host, ""},
	} {
		url := pageURL(s, ts, "/?pid="+strconv.Itoa(tt.pid))
		if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#panel-cpu canvas"))); err != nil {
			t.Fatalf("load %s: %v", url, err)
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[document.getElementById("ctr").hidden ? "" : document.getElementById("ctr").textContent, document.getElementById("ctr").title]`))
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != tt.want {
			t.Errorf("pid %d: container shown %q, want %q", tt.pid, got[0], tt.want)
		}
		if tt.want != "" && got[1] != "podman container "+testContainer.ID+" (cgroup "+testContainer.Dir+"; names from "+testContainer.MetaFrom+")" {
			t.Errorf("pid %d: its title %q", tt.pid, got[1])
		}
		if tt.want != "" {
			saveScreenshot(t, ctx, "process-container.png")
		}
	}
	pw.check(t)
}
