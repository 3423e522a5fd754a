package doctor

import (
	"strings"
	"testing"
)

// TestServingWeighsReopenAndKernelTime: file reopening and kernel time in
// a process serving requests are the requests' own work unless one file
// is read again and again: table tests on windows built in the test.
func TestServingWeighsReopenAndKernelTime(t *testing.T) {
	host := &Host{CPUs: 2}
	churn := func(w *Window) {
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 5000, "close": 5000, "fstat": 1000, "epoll_ctl": 8000}}
	}
	served := func(share float64) func(w *Window) {
		return func(w *Window) {
			w.Stacks = &Stacks{Samples: 300, KernelShare: 0.5, Classes: map[string]float64{ClassUserCode: 0.3}, Serving: share}
		}
	}
	files := func(caught int, paths ...Share) func(w *Window) {
		return func(w *Window) { w.Files = &Files{Seconds: 9, Listings: 1800, Caught: caught, Paths: paths} }
	}
	all := func(fs ...func(w *Window)) *Window {
		return win(10, func(w *Window) {
			for _, f := range fs {
				f(w)
			}
		})
	}
	tests := []struct {
		name     string
		w        *Window
		rule     string
		want     Severity // -1: must not fire
		evidence string   // in the finding's evidence, when set
	}{
		{"a loop re-opening one file warns and names it", all(churn, files(12, Share{Name: "/etc/app.conf", Share: 1})),
			"file-reopen-churn", Warn, "path /etc/app.conf"},
		{"a loop re-opening many files warns (a top-like monitor)", all(churn, files(40, Share{Name: "/proc/1/stat", Share: 0.05}, Share{Name: "/proc/2/stat", Share: 0.05})),
			"file-reopen-churn", Warn, ""},
		{"a server reading many files per request (a metrics endpoint) is information", all(churn, served(0.3), files(40, Share{Name: "/proc/stat", Share: 0.2}, Share{Name: "/proc/self/fd", Share: 0.2})),
			"file-reopen-churn", Info, "serving_share_pct 30"},
		{"a server with no file caught is information", all(churn, served(0.3)),
			"file-reopen-churn", Info, ""},
		{"a handler re-reading its configuration per request still warns", all(churn, served(0.3), files(9, Share{Name: "/srv/config.json", Share: 0.9})),
			"file-reopen-churn", Warn, "path_share_pct 90"},
		{"a trace of the request path is not serving", all(churn, served(0.005), files(40, Share{Name: "/proc/stat", Share: 0.2})),
			"file-reopen-churn", Warn, ""},
		{"too few files caught to name one", all(churn, files(2, Share{Name: "/etc/app.conf", Share: 1})),
			"file-reopen-churn", Warn, ""},

		{"futex-heavy kernel time warns in a process not serving", all(func(w *Window) {
			w.UserSec, w.SysSec = 0.3, 0.7
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 50000, "nanosleep": 20000, "read": 1000}}
		}, served(0)), "kernel-time", Warn, ""},
		{"futex-heavy kernel time of a server under load is information", all(func(w *Window) {
			w.UserSec, w.SysSec = 0.3, 0.7
			w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"futex": 50000, "nanosleep": 20000, "read": 1000}}
		}, served(0.25)), "kernel-time", Info, "serving_share_pct 25"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ruleSeverity(t, tt.w, host, tt.rule, tt.want)
			if tt.evidence == "" {
				return
			}
			if !strings.Contains(evidenceText(got.Evidence), tt.evidence) {
				t.Errorf("evidence %q lacks %q", evidenceText(got.Evidence), tt.evidence)
			}
		})
	}
}

// TestReopenFromOpenat: exact openat counts decide reopen churn even when
// the per-task syscall counters missed most of the opens.
func TestReopenFromOpenat(t *testing.T) {
	w := win(10, func(w *Window) {
		w.Syscalls = &Syscalls{Seconds: 5, Counts: map[string]uint64{"openat": 700, "close": 3500, "read": 9000}}
		w.Files = &Files{Method: "openat", Seconds: 8, Opens: 5600, Caught: 5600, Paths: []Share{{Name: "/srv/app.conf", Share: 1}}}
	})
	f := ruleSeverity(t, w, &Host{CPUs: 2}, "file-reopen-churn", Warn)
	if !strings.Contains(evidenceText(f.Evidence), "opens_per_s 700") || !strings.Contains(evidenceText(f.Evidence), "path /srv/app.conf") {
		t.Errorf("evidence %q: want the counted 700 opens a second and the path", evidenceText(f.Evidence))
	}
	// Listings see only some opens: they name the file, never the rate.
	w.Files.Method = "listings"
	ruleSeverity(t, w, &Host{CPUs: 2}, "file-reopen-churn", Info)
}

// TestBarelyRanWhy: as root, a process that barely ran gives the close
// look nothing to sample, and the undecided rules say so instead of
// pointing at notes that do not exist; one that ran says the look failed.
func TestBarelyRanWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpu  float64
		want string
	}{
		{"idle", 0.001, "barely ran in the window (0.01% of a core)"},
		{"busy", 2, "could not get it (see the notes)"},
	} {
		w := win(10, func(w *Window) { w.UserSec = tc.cpu })
		_, un := Evaluate(w, &Host{CPUs: 2, Root: true})
		found := false
		for _, u := range un {
			if u.Rule == "cpu-hotspot" {
				found = true
				if !strings.Contains(u.Why, tc.want) {
					t.Errorf("%s: cpu-hotspot undecided because %q, want %q in it", tc.name, u.Why, tc.want)
				}
			}
		}
		if !found {
			t.Errorf("%s: cpu-hotspot decided without stack samples", tc.name)
		}
	}
}
