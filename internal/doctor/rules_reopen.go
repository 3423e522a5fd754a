package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// file-reopen-churn: the same files opened and closed over and over (a
// monitor re-reading /proc files, a config file read per request). Its
// thresholds, then its evidence from syscall counts, probes on the callers
// of the open, the openat paths caught and the kernel stack samples.
const (
	// Reopen churn from kernel samples: open+close at least this share of
	// all samples (a loop of os.ReadFile on /proc files: openat alone took
	// 16% of samples), with at least minSiteSamples samples.
	reopenSampleInfo = 0.05
	// openat's part of the open family's samples (a config file re-read
	// gave 0.4: openat 15%, fcntl 19%, close 4%).
	reopenOpenPart   = 0.25
	reopenSampleWarn = 0.10
	// Reopen churn: opens per second, and closes at least this fraction of
	// opens with a flat descriptor count.
	reopenInfo       = 100.0
	reopenWarn       = 500.0
	reopenCloseRatio = 0.8
	// Reopen churn is one file read again and again when the path caught
	// open most often holds at least this share of the files caught (with
	// at least reopenMinCaught caught); spread over many files in a
	// process serving requests, it is each request reading what it
	// reports (node_exporter at 5 scrapes a second: ~980 opens/s over
	// hundreds of /proc and /sys files; etcd's /metrics: 4 /proc files a
	// scrape).
	reopenSamePath  = 0.5
	reopenMinCaught = 3
)

func checkReopen(w *Window, h *Host) *Finding {
	if f := reopenFromOpenat(w); f != nil {
		return f
	}
	if w.Syscalls == nil {
		if f := reopenFromProbes(w); f != nil {
			return f
		}
		return reopenFromStacks(w)
	}
	opens, _ := w.Syscalls.Rate("open", "openat", "openat2")
	closes, _ := w.Syscalls.Rate("close")
	if opens < reopenInfo || closes < reopenCloseRatio*opens {
		return nil
	}
	if execOpens(w, opens) {
		return nil
	}
	ev := EvidenceList{
		{"opens_per_s", round(opens, 0), "/s"},
		{"closes_per_s", round(closes, 0), "/s"},
	}
	if fst, _ := w.Syscalls.Rate("fstat", "newfstatat", "statx"); fst > 0 {
		ev = append(ev, Evidence{"stat_per_s", round(fst, 0), "/s"})
	}
	if ep, _ := w.Syscalls.Rate("epoll_ctl"); ep > 0 {
		ev = append(ev, Evidence{"epoll_ctl_per_s", round(ep, 0), "/s"})
	}
	if !fdsFlat(w, opens) {
		return nil
	}
	for _, fn := range probeOpen {
		if a, ok := probeArg(w, fn); ok && a.Name != "" {
			ev = append(ev, Evidence{"path", a.Name, ""}, Evidence{"path_share_pct", pct(a.Share), "% of opens"})
			break
		}
	}
	return reopenCounted(w, opens, fmt.Sprintf("opens and closes files %.0f times a second", opens), ev, []Source{SourceProc, SourceSyscalls})
}

// reopenCounted is a reopen finding from a count of opens (syscall
// counters, openat by path, or probed calls): a warning from reopenWarn a
// second, high confidence, weighed by reopenWeigh.
func reopenCounted(w *Window, opens float64, title string, ev EvidenceList, sources []Source) *Finding {
	sev := Info
	if opens >= reopenWarn {
		sev = Warn
	}
	f := reopenFinding(w, sev, title, ev)
	f.Sources = codeSources(sources, f.Code)
	f.Confidence = "high"
	reopenWeigh(w, f)
	return f
}

// execOpens reports whether starting programs explains the opens: the
// syscall counters follow children, whose start-up opens libraries and
// configuration, and os/exec itself opens /dev/null for each child's
// unset standard streams (100 opens a second at 100 children a second).
// That is exec cost, not churn.
func execOpens(w *Window, opens float64) bool {
	waits, _ := w.Syscalls.Rate("wait4", "waitid")
	return waits >= execPerSecInfo && opens < 20*waits
}

// reopenFromOpenat decides reopen churn from the thread group's openat
// calls counted by BPF with their paths, which are exact whatever thread
// makes them (the per-task syscall counters have been seen to miss a
// server's handler threads' opens in some windows: 154-700 of 700 a
// second) and leave out exec'd children; the closes are inferred from a
// flat descriptor count, or counted when the syscall counters have them.
func reopenFromOpenat(w *Window) *Finding {
	opens, ok := w.Files.OpensPerSec()
	if !ok || opens < reopenInfo || !fdsFlat(w, opens) || execOpens(w, opens) {
		return nil
	}
	ev := EvidenceList{{"opens_per_s", round(opens, 0), "/s (openat, counted by BPF)"}}
	sources := []Source{SourceProc, SourceFDs}
	if closes, ok := w.Syscalls.Rate("close"); ok {
		ev = append(ev, Evidence{"closes_per_s", round(closes, 0), "/s"})
		sources = append(sources, SourceSyscalls)
	}
	return reopenCounted(w, opens, fmt.Sprintf("opens and closes files %.0f times a second", opens), ev, sources)
}

// reopenFromProbes decides reopen churn from exact counts of the Go
// calls that open files (os.OpenFile, under os.Open and os.ReadFile), when
// syscalls could not be counted: the count is exact, the closes are
// inferred from a flat descriptor count.
func reopenFromProbes(w *Window) *Finding {
	for _, fn := range probeOpen {
		opens, ok := w.Probes.Rate(fn)
		if !ok || opens < reopenInfo || !w.FDsKnown || !fdsFlat(w, opens) {
			continue
		}
		ev := EvidenceList{{"opens_per_s", round(opens, 0), "/s"}, {"probed", fn, ""}}
		return reopenCounted(w, opens, fmt.Sprintf("opens files %.0f times a second (and the descriptors do not pile up: each is closed)", opens), ev, []Source{SourceProc, SourceProbes})
	}
	return nil
}

// fdsFlat reports whether the descriptor count stayed flat (churn) rather
// than rising with the opens (a leak), true when unknown. A reading taken
// while the process has its file open counts it: a rise of a descriptor
// or two is the churn itself (with the opens unknown, opensPerSec 0, a
// clean-clone CI run lost a reopen finding to one), a leak rises by its
// open rate times the window.
func fdsFlat(w *Window, opensPerSec float64) bool {
	if !w.FDsKnown || len(w.Series) < 2 {
		return true
	}
	first, last := w.Series[0].FDs, w.Series[len(w.Series)-1].FDs
	return float64(last-first) <= max(0.05*opensPerSec*w.Seconds(), 2)
}

// reopenFromStacks decides reopen churn from kernel stack samples when
// syscalls could not be counted: time in openat and close is a share of
// CPU, so the finding gives shares and a low confidence.
func reopenFromStacks(w *Window) *Finding {
	// The evidence is a count of samples in openat (at least
	// minSiteSamples), not a share read to a point: a light process gives
	// fewer than minSamples in a short window (19 in 4 s at 10% of a core
	// on a loaded host, 4 of them in openat).
	st := w.Stacks
	if st == nil || st.Samples < minSamples/2 || w.Cores() < insideMinCores {
		return nil
	}
	// os.ReadFile's whole family: openat, the fcntl and epoll_ctl that
	// register the descriptor with the netpoller, fstat, close. A light
	// loop's openat alone gives a handful of samples in a window.
	var open, family float64
	for _, p := range st.KernelPaths {
		name, ok := strings.CutPrefix(p.Name, "syscall ")
		if !ok {
			continue
		}
		switch name {
		case "openat", "open", "openat2":
			open += p.Share
			family += p.Share
		case "close", "close_range", "fcntl", "fstat", "newfstatat", "statx", "epoll_ctl":
			family += p.Share
		}
	}
	share := family
	n := float64(st.Samples)
	if !fdsFlat(w, 0) {
		return nil
	}
	// openat must be a good part of it: a server that accepts and closes
	// connections has close, fcntl and epoll_ctl too, but no openat.
	if share < reopenSampleInfo || share*n < minSiteSamples || open*n < 2 || open < reopenOpenPart*share {
		return reopenFromCall(w)
	}
	// Exec'd children open their libraries, but their samples are not the
	// parent's; the parent's own exec path is not openat.
	sev := Info
	if share >= reopenSampleWarn {
		sev = Warn
	}
	ev := EvidenceList{
		{"openat_sample_share_pct", pct(open), "% of samples"},
		{"open_family_sample_share_pct", pct(share), "% of samples (openat, fcntl, epoll_ctl, fstat, close)"},
		{"open_family_cpu_pct", pct(share * w.Cores()), "% of a core"},
	}
	f := reopenFinding(w, sev, fmt.Sprintf("%.0f%% of CPU samples open and close files", 100*share), ev)
	f.Sources = codeSources([]Source{SourceProc, SourceStacks}, f.Code)
	f.Confidence = "low"
	f.Cause += " (Decided from kernel stack samples, which give the share of time in openat and close but not how often: syscalls could not be counted.)"
	reopenWeigh(w, f)
	return f
}

// reopenWeigh names the file a reopen finding's process was caught with
// open most often, and weighs where the opens come from: in a process
// serving requests, opens spread over many files (or over files not
// caught) are the requests' own reading, whose number follows the load,
// so the finding is information; one file read again and again stays a
// warning, served or not (a handler re-reading its configuration).
func reopenWeigh(w *Window, f *Finding) {
	path, share := w.Files.Top(reopenMinCaught)
	if path != "" && !slices.ContainsFunc(f.Evidence, func(e Evidence) bool { return e.Name == "path" }) {
		if w.Files.Method == "openat" {
			f.Evidence = append(f.Evidence, Evidence{"path", path, ""},
				Evidence{"path_share_pct", pct(share), "% of opens"},
				Evidence{"paths", joinShares(w.Files.Paths, 3), ""})
			f.Cause += fmt.Sprintf(" The file opened most often: %s (%.0f%% of opens, counted from the openat calls).", path, 100*share)
		} else {
			f.Evidence = append(f.Evidence, Evidence{"path", path, ""},
				Evidence{"path_share_pct", pct(share), "% of the files caught open"},
				Evidence{"files_caught", w.Files.Caught, fmt.Sprintf("in %d listings of its descriptors", w.Files.Listings)})
			f.Cause += fmt.Sprintf(" The file caught open most often: %s (%.0f%% of the files caught open in listings of its descriptors).", path, 100*share)
		}
		if !slices.Contains(f.Sources, SourceFDs) {
			f.Sources = append(f.Sources, SourceFDs)
		}
	}
	sv, ok := serving(w)
	if f.Severity < Warn || !ok || (path != "" && share >= reopenSamePath) {
		return
	}
	f.Severity = Info
	f.Evidence = append(f.Evidence, Evidence{"serving_share_pct", pct(sv), "% of samples on the request path"})
	f.Cause += fmt.Sprintf(" The process is serving requests (%.0f%% of its samples on a server's request path) and no one file dominates the files caught open: the opens are the requests' own reading (an endpoint that reads /proc or many files per request), and their rate follows the load. Information: keeping the files open would make each request cheaper.", 100*sv)
}

// fileReadCalls open, read and close a file in one call: a hot call to
// one of them re-opens files.
var fileReadCalls = []string{"os.ReadFile", "io/ioutil.ReadFile", "os.ReadDir", "io/ioutil.ReadDir"}

// opensFiles reports whether a library call opens a file: one of
// fileReadCalls, or os.Open and os.OpenFile.
func opensFiles(callee string) bool {
	return slices.Contains(fileReadCalls, callee) || callee == "os.Open" || callee == "os.OpenFile"
}

// reopenFromCall is the weakest evidence of reopen churn: without syscall
// counts and with too few kernel samples in openat and close to weigh, a
// call that opens, reads and closes a file holds a quarter or more of the
// samples, and the kernel samples of open or close fall under its caller.
// Information only: how often files are opened is not known.
func reopenFromCall(w *Window) *Finding {
	st := w.Stacks
	if len(st.LibCalls) == 0 || w.SysSec < kernelShareInfo*w.CPUSec() {
		return nil
	}
	c := st.LibCalls[0]
	if !slices.Contains(fileReadCalls, c.Callee) || c.Share < hotCallShare || c.Share*float64(st.Samples) < hotCallMinSamples {
		return nil
	}
	opens := false
	for _, key := range []string{"syscall openat", "syscall open", "syscall close"} {
		for _, s := range st.Sites[key] {
			opens = opens || s.Func == c.Caller.Func
		}
	}
	if !opens {
		return nil
	}
	ev := EvidenceList{
		{"call", c.Callee, ""},
		{"cumulative_share_pct", pct(c.Share), "% of samples"},
		{"sys_share_pct", pct(w.SysSec / w.CPUSec()), "%"},
	}
	f := reopenFinding(w, Info, fmt.Sprintf("%.0f%% of CPU samples are under %s, which opens and closes a file per call", 100*c.Share, c.Callee), ev)
	f.Code = []CodeRef{callRef(c)}
	f.Sources = []Source{SourceProc, SourceStacks}
	f.Confidence = "low"
	f.Cause += " (Decided from stack samples only: syscalls could not be counted, so how often files are opened is unknown; kernel samples of open and close fall under this call.)"
	return f
}

func reopenCode(w *Window) []CodeRef {
	if code, _, _ := probeCode(w, probeOpen, 0, "opens a file"); len(code) > 0 {
		return code
	}
	if code := kernelCode(w, []string{"openat", "open", "close"}); len(code) > 0 {
		return code
	}
	// Too few kernel samples in open and close: the call that opens files
	// and holds the most samples.
	if w.Stacks != nil {
		for _, c := range w.Stacks.LibCalls {
			if opensFiles(c.Callee) {
				return []CodeRef{callRef(c)}
			}
		}
	}
	return nil
}

func reopenFinding(w *Window, sev Severity, title string, ev EvidenceList) *Finding {
	return &Finding{
		Severity: sev,
		Title:    title,
		Evidence: ev,
		Cause:    "The same files are opened, read and closed again and again (a /proc or config reader in a loop). In Go one os.ReadFile is about ten syscalls (openat, fcntl, epoll_ctl, fstat, read x2, close); a pread on a kept descriptor is one.",
		Fix:      "Keep the descriptor open and re-read it with pread at offset 0 (or ReadAt), reusing the buffer; read only the files that changed; cache what does not change.",
		Cores:    w.SysSec / w.Seconds(),
		Code:     reopenCode(w),
	}
}
