package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/gosleuth/gosleuth/internal/proc"
)

// state is what the page shows beside the charts: the process, its
// sources and the doctor's findings.
type state struct {
	PID        int        `json:"pid"`
	Comm       string     `json:"comm"`
	Cmdline    string     `json:"cmdline"`
	GoVersion  string     `json:"go_version,omitempty"`
	IsGo       bool       `json:"is_go"`
	Running    bool       `json:"sampling"`
	Exited     bool       `json:"exited"`
	ExitedAt   float64    `json:"exited_at,omitempty"`
	SamplerErr string     `json:"sampler_error,omitempty"`
	Runtime    srcState   `json:"runtime"`
	Syscalls   sysState   `json:"syscalls"`
	Interval   float64    `json:"interval"`
	Capacity   int        `json:"capacity"`
	Viewers    int        `json:"viewers"`
	Findings   []finding  `json:"findings"`
	Unchecked  []unchkOut `json:"unchecked"`
	EvalFrom   float64    `json:"eval_from,omitempty"`
	EvalTo     float64    `json:"eval_to,omitempty"`
	// CPUNote says how the CPU behind the findings was measured, when
	// exact syscall counting (which costs the process CPU) was on.
	CPUNote string `json:"cpu_note,omitempty"`
	// NSPID is the process's PID in its own PID namespace (a container's
	// view of it), there only when it differs from PID.
	NSPID int `json:"nspid,omitempty"`
	// Container is the container the process runs in, and ContainerText
	// the words the other commands name it with ("podman 0123456789ab
	// name web image localhost/app:1"); absent on the host.
	Container     *proc.Container `json:"container,omitempty"`
	ContainerText string          `json:"container_text,omitempty"`
}

type srcState struct {
	From string `json:"from,omitempty"`
	Why  string `json:"why,omitempty"`
}

type sysState struct {
	// Mode is "exact" while counters are attached, else "proc" (the
	// read/write-class counters of /proc/PID/io).
	Mode      string `json:"mode"`
	Mechanism string `json:"mechanism,omitempty"`
	Why       string `json:"why,omitempty"`
	CanExact  bool   `json:"can_exact"`
}

type unchkOut struct {
	Rule string `json:"rule"`
	Why  string `json:"why"`
}

// stateLocked returns the watch's state as JSON. w.mu is held.
func (w *watch) stateLocked() []byte {
	st := state{
		PID: w.pid, Comm: w.comm, Cmdline: w.cmdline, GoVersion: w.facts.GoVersion, IsGo: w.facts.IsGo,
		Running: w.running, Exited: w.exited, SamplerErr: w.samplerErr,
		Runtime:  srcState{From: w.runtimeFrom, Why: w.runtimeWhy},
		Syscalls: sysState{Mode: "proc", Why: w.exactWhy, CanExact: os.Geteuid() == 0},
		Interval: w.s.cfg.Interval.Seconds(), Capacity: w.ring.capacity(), Viewers: w.viewers,
		Findings: w.findings.List, EvalFrom: w.findings.From, EvalTo: w.findings.To, CPUNote: w.findings.CPUNote,
	}
	if w.facts.NSPID != w.pid && w.facts.NSPID > 0 {
		st.NSPID = w.facts.NSPID
	}
	if c := w.facts.Container; c != nil {
		st.Container, st.ContainerText = c, c.String()
	}
	if w.exited {
		st.ExitedAt = float64(w.exitedAt.UnixMilli()) / 1e3
	}
	if w.exactOn {
		st.Syscalls.Mode, st.Syscalls.Mechanism = "exact", w.exactMech
	}
	if st.Findings == nil {
		st.Findings = []finding{}
	}
	for _, u := range w.findings.Unchecked {
		st.Unchecked = append(st.Unchecked, unchkOut{u.Rule, u.Why})
	}
	b, err := json.Marshal(st)
	if err != nil {
		// A rule's evidence held a NaN: drop the findings, say why.
		st.Findings = []finding{}
		st.SamplerErr = "encode findings: " + err.Error()
		b, _ = json.Marshal(st)
	}
	return b
}

// cols is the series' names and units, sent once with the history.
var colsJSON = func() []byte {
	type c struct {
		Name string `json:"name"`
		Unit string `json:"unit"`
	}
	var out []c
	for _, ci := range colInfo {
		out = append(out, c{ci.name, ci.unit})
	}
	b, _ := json.Marshal(out)
	return b
}()

// serveHistory answers /api/history?pid=N with the process's state, the
// series' names and every row held: the page draws the past at once, then
// follows /api/events from the last sequence number. Asking starts the
// sampler (it stops after Config.Linger unless a stream holds it).
func (s *Server) serveHistory(rw http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	w, err := s.watchFor(pid)
	if err != nil {
		httpError(rw, err)
		return
	}
	w.acquire()
	defer w.release()
	w.mu.Lock()
	b := make([]byte, 0, 64<<10)
	b = append(b, `{"state":`...)
	b = append(b, w.stateLocked()...)
	b = append(b, `,"series":`...)
	b = append(b, colsJSON...)
	b = append(b, `,"data":`...)
	b = w.ring.appendJSON(b, 0)
	b = append(b, '}')
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	writeBody(rw, r, b, gzipIfLarge(b, r))
}

// serveEvents streams a process's new rows (event "points", id = the last
// row's sequence number) and its state when it changes (event "state") as
// server-sent events. It starts after ?since=SEQ or the Last-Event-ID the
// browser sends when it reconnects, so no row is lost or sent twice. The
// page closes the stream when its tab is hidden: the sampler then stops
// once no stream is left (after Config.Linger).
func (s *Server) serveEvents(rw http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	fl, ok := rw.(http.Flusher)
	if !ok {
		http.Error(rw, "streaming not supported", http.StatusInternalServerError)
		return
	}
	w, err := s.watchFor(pid)
	if err != nil {
		httpError(rw, err)
		return
	}
	since, _ := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64)
	if v := r.URL.Query().Get("since"); v != "" && since == 0 {
		since, _ = strconv.ParseUint(v, 10, 64)
	}
	w.acquire()
	defer w.release()
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	rw.WriteHeader(http.StatusOK)
	var buf []byte
	var lastState []byte
	for first := true; ; first = false {
		ch := w.wait()
		w.mu.Lock()
		buf = buf[:0]
		if w.ring.seq > since {
			buf = append(buf, "id: "...)
			buf = strconv.AppendUint(buf, w.ring.seq, 10)
			buf = append(buf, "\nevent: points\ndata: "...)
			buf = w.ring.appendJSON(buf, since)
			buf = append(buf, "\n\n"...)
			since = w.ring.seq
		}
		st := w.stateLocked()
		done := !w.running && (w.exited || s.closedLocked())
		w.mu.Unlock()
		if first || string(st) != string(lastState) {
			buf = append(buf, "event: state\ndata: "...)
			buf = append(buf, st...)
			buf = append(buf, "\n\n"...)
			lastState = st
		}
		if len(buf) > 0 {
			if _, err := rw.Write(buf); err != nil {
				return
			}
			fl.Flush()
		}
		if done {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

func (s *Server) closedLocked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// serveSyscallMode (POST only) switches a process's syscall chart between
// /proc's read/write-class counters (?mode=proc, free) and exact counts by
// kind (?mode=exact: per-task tracepoint counters, root only, which cost
// the target about a microsecond per syscall while on). Exact mode ends
// when the sampler stops.
func (s *Server) serveSyscallMode(rw http.ResponseWriter, r *http.Request) {
	pid, err := pidParam(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	mode := r.URL.Query().Get("mode")
	if mode != "exact" && mode != "proc" {
		http.Error(rw, fmt.Sprintf("want ?mode=exact or ?mode=proc, got %q", mode), http.StatusBadRequest)
		return
	}
	w, err := s.watchFor(pid)
	if err != nil {
		httpError(rw, err)
		return
	}
	if err := w.setExact(mode == "exact"); err != nil {
		httpError(rw, err)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, "{\"mode\":%q}\n", mode)
}

// gzipIfLarge compresses a reply worth it when the client takes gzip.
func gzipIfLarge(b []byte, r *http.Request) []byte {
	if len(b) < 8<<10 {
		return nil
	}
	return gzipBytes(b)
}
