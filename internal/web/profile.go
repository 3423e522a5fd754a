package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gosleuth/gosleuth/internal/profileview"
	"github.com/gosleuth/gosleuth/internal/stacks"
)

// profileRun is one finished profile.
type profileRun struct {
	ID      int       `json:"id"`
	PID     int       `json:"pid"`
	Start   time.Time `json:"start"`
	Seconds float64   `json:"seconds"`
	Samples int64     `json:"samples"`
	Hz      int       `json:"hz"`
	Notes   []string  `json:"notes"`
	// Flame is the flame graph's tree (profileview.FlameJSON).
	Flame json.RawMessage `json:"flame"`
	pprof []byte
}

// profileStore keeps the last profiles (for the download and the diff)
// and lets one profile run per process at a time.
type profileStore struct {
	mu      sync.Mutex
	next    int
	runs    []*profileRun
	running map[int]bool
}

const keepProfiles = 8

// serveProfile answers POST /api/profile?pid=N[&seconds=10]: it samples
// user and kernel stacks (user only without privileges) for the given
// seconds and returns the flame graph's tree, with the id under which
// /api/profile.pb.gz?id=ID serves the pprof file. It takes as long as the
// profile. GET /api/profile?id=ID returns a kept profile instead.
func (s *Server) serveProfile(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method != http.MethodPost {
		id := q.Get("id")
		if id == "" {
			rw.Header().Set("Allow", "POST")
			http.Error(rw, "starting a profile is a POST; GET takes ?id= of a kept profile", http.StatusMethodNotAllowed)
			return
		}
		run := s.profiles.get(id)
		if run == nil {
			http.Error(rw, "no such profile (only the last 8 are kept)", http.StatusNotFound)
			return
		}
		writeProfile(rw, r, run)
		return
	}
	pid, err := pidParam(r)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	sec := 10.0
	if v := q.Get("seconds"); v != "" {
		sec, err = strconv.ParseFloat(v, 64)
		if err != nil || sec < 1 || sec > s.cfg.ProfileLimit.Seconds() {
			http.Error(rw, fmt.Sprintf("?seconds must be between 1 and %.0f", s.cfg.ProfileLimit.Seconds()), http.StatusBadRequest)
			return
		}
	}
	if _, err := s.watchFor(pid); err != nil {
		httpError(rw, err)
		return
	}
	st := &s.profiles
	st.mu.Lock()
	if st.running == nil {
		st.running = map[int]bool{}
	}
	if st.running[pid] {
		st.mu.Unlock()
		http.Error(rw, fmt.Sprintf("a profile of process %d is already running", pid), http.StatusConflict)
		return
	}
	st.running[pid] = true
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		delete(st.running, pid)
		st.mu.Unlock()
	}()
	start := time.Now()
	raw, err := stacks.Sample(r.Context(), stacks.Options{PID: pid, Duration: time.Duration(sec * float64(time.Second))})
	if err != nil {
		httpError(rw, fmt.Errorf("profile process %d: %w", pid, err))
		return
	}
	p := stacks.Symbolize(raw)
	flame, err := profileview.FlameJSON(p)
	if err != nil {
		httpError(rw, err)
		return
	}
	var pb bytes.Buffer
	if err := p.WritePprof(&pb); err != nil {
		httpError(rw, err)
		return
	}
	run := &profileRun{PID: pid, Start: start, Seconds: p.End.Sub(p.Start).Seconds(), Samples: p.Samples,
		Hz: p.Hz, Notes: p.Notes, Flame: flame, pprof: pb.Bytes()}
	if run.Notes == nil {
		run.Notes = []string{}
	}
	st.add(run)
	writeProfile(rw, r, run)
}

func writeProfile(rw http.ResponseWriter, r *http.Request, run *profileRun) {
	b, err := json.Marshal(run)
	if err != nil {
		httpError(rw, err)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	writeBody(rw, r, b, gzipIfLarge(b, r))
}

func (st *profileStore) add(run *profileRun) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.next++
	run.ID = st.next
	st.runs = append(st.runs, run)
	if len(st.runs) > keepProfiles {
		st.runs = st.runs[1:]
	}
}

func (st *profileStore) get(id string) *profileRun {
	n, err := strconv.Atoi(id)
	if err != nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, run := range st.runs {
		if run.ID == n {
			return run
		}
	}
	return nil
}

// servePprof serves a kept profile as a pprof file (gzipped protobuf).
func (s *Server) servePprof(rw http.ResponseWriter, r *http.Request) {
	run := s.profiles.get(r.URL.Query().Get("id"))
	if run == nil {
		http.Error(rw, "no such profile (only the last 8 are kept)", http.StatusNotFound)
		return
	}
	rw.Header().Set("Content-Type", "application/octet-stream")
	rw.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=\"gosleuth-%d-%s.pb.gz\"", run.PID, run.Start.UTC().Format("20060102T150405Z")))
	writeBody(rw, r, run.pprof, nil)
}
