package web

import (
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/top"
)

// listInterval is the process list's refresh period.
const listInterval = 2 * time.Second

// procList is the process list: top's view of every process (or the --pid
// ones), refreshed while a list page is open.
type procList struct {
	s *Server
	life
	table []byte // the latest table as JSON
}

// The list's columns: numbers sort, texts read; the page shows them in
// this order.
var listCols = []string{"pid", "user", "state", "cpu", "usr", "sys", "rss", "threads", "fds", "fdlimit", "wake", "nvcsw", "runq", "sysc", "go", "command"}

func (l *procList) acquire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquireLocked(true, &l.s.wg, l.run)
}

func (l *procList) run(stopc chan struct{}) {
	cfg := l.s.cfg
	r, err := proc.NewReader(proc.Options{Root: cfg.ProcRoot, PIDs: cfg.PIDs, SkipKernelThreads: true})
	if err != nil {
		l.publish(errJSON(err))
		return
	}
	defer r.Close()
	prev, cur := new(proc.Snapshot), new(proc.Snapshot)
	var rates proc.Rates
	view := top.View{Sort: top.ColCPU}
	var cells []string
	if err := r.Snapshot(cur); err != nil {
		l.publish(errJSON(err))
		return
	}
	// A first table at once (without rates), the next one soon after.
	wait := 300 * time.Millisecond
	for {
		select {
		case <-stopc:
			return
		case <-time.After(wait):
		}
		wait = listInterval
		prev, cur = cur, prev
		if err := r.Snapshot(cur); err != nil {
			l.publish(errJSON(err))
			continue
		}
		rates.Compute(prev, cur)
		rows := view.Rows(cur, &rates)
		out := make([][]any, 0, len(rows))
		for _, row := range rows {
			p := row.Proc
			if !cfg.AllUsers && int(p.UID) != l.s.uid {
				continue
			}
			cells = view.Cells(row, cells)
			num := func(v float64, ok bool) any {
				if !ok || math.IsNaN(v) {
					return nil
				}
				return round(v, 1)
			}
			rt := row.Rate
			have := rt != nil && !rt.New
			var usr, sys, wake, nvcsw, runq, sysc float64
			if have {
				usr, sys, wake, nvcsw, runq, sysc = rt.UserPct, rt.SysPct, rt.VolPerSec, rt.InvolPerSec, rt.RunQueuePct, rt.SyscallsPerSec
			}
			lim := any(nil)
			if p.Known&proc.KnownFDLimit != 0 {
				lim = p.FDLimit
				if p.FDLimit == proc.Unlimited {
					lim = -1
				}
			}
			out = append(out, []any{
				p.PID, cells[top.ColUser], string(rune(p.State)),
				num(usr+sys, have), num(usr, have), num(sys, have),
				p.RSSBytes, p.Threads, num(float64(p.FDs), p.Known&proc.KnownFDs != 0), lim,
				num(wake, have), num(nvcsw, have), num(runq, have), num(sysc, have && sysc >= 0),
				cells[top.ColGo], cells[top.ColCommand],
			})
		}
		b, err := json.Marshal(map[string]any{"time": float64(cur.Time.UnixMilli()) / 1e3, "cols": listCols, "rows": out, "all_users": cfg.AllUsers})
		if err != nil {
			b = errJSON(err)
		}
		l.publish(b)
	}
}

func (l *procList) publish(b []byte) {
	l.mu.Lock()
	l.table = b
	l.notifyLocked()
	l.mu.Unlock()
}

func errJSON(err error) []byte {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	return b
}

// serveProcs answers /api/procs with the latest process table (waiting
// for the first one when the list was not being sampled).
func (s *Server) serveProcs(rw http.ResponseWriter, r *http.Request) {
	l := s.list
	l.acquire()
	defer l.release(s.cfg.Linger)
	for {
		ch := l.wait()
		l.mu.Lock()
		b := l.table
		l.mu.Unlock()
		if b != nil {
			rw.Header().Set("Content-Type", "application/json")
			writeBody(rw, r, b, gzipIfLarge(b, r))
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

// serveProcEvents streams the process table as server-sent events
// ("procs"), one per refresh, while the list page is open and visible.
func (s *Server) serveProcEvents(rw http.ResponseWriter, r *http.Request) {
	fl, ok := rw.(http.Flusher)
	if !ok {
		http.Error(rw, "streaming not supported", http.StatusInternalServerError)
		return
	}
	l := s.list
	l.acquire()
	defer l.release(s.cfg.Linger)
	rw.Header().Set("Content-Type", "text/event-stream")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(http.StatusOK)
	fl.Flush()
	var sent []byte
	for {
		ch := l.wait()
		l.mu.Lock()
		b := l.table
		running := l.running
		l.mu.Unlock()
		if b != nil && string(b) != string(sent) {
			sent = b
			if _, err := rw.Write(append(append([]byte("event: procs\ndata: "), b...), "\n\n"...)); err != nil {
				return
			}
			fl.Flush()
		}
		if !running && s.closedLocked() {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}

// round rounds v to d decimals.
func round(v float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}
