// Package inspect is the view behind "gosleuth inspect": what a Go
// process's runtime did over a window (from the runtime sources of
// internal/goruntime) beside what /proc saw of it (a window of
// internal/window), as text or JSON.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gosleuth/gosleuth/internal/atomicfile"
	"github.com/gosleuth/gosleuth/internal/gomem"
	"github.com/gosleuth/gosleuth/internal/goruntime"
	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/window"
)

// Options configure Run.
type Options struct {
	PID int
	// Duration is the window; it ends early when ctx is cancelled.
	Duration time.Duration
	// ProcRoot, PprofURL, MetricsURL and AgentDirs are as in Options.
	ProcRoot   string
	PprofURL   string
	MetricsURL string
	AgentDirs  []string
	// Groups caps the goroutine groups kept in the report (default 10;
	// negative: no dump).
	Groups int
	// DumpMax is the most goroutines the target may have for the dump to
	// be taken (default DefaultDumpMax; negative: no limit). A full dump
	// stops the target's world for about 3 µs per goroutine.
	DumpMax int
	// DumpFromSource takes the goroutine dump from the runtime source
	// (which stops the process's world) even where the dump can be read
	// from memory (which does not).
	DumpFromSource bool
	// TracePath, when set, receives the agent's FlightRecorder snapshot
	// taken at the end of the window.
	TracePath string
}

// ProcView is what /proc says about the process over the window.
type ProcView struct {
	Seconds  float64 `json:"seconds"`
	UserPct  float64 `json:"cpu_user_pct"`
	SysPct   float64 `json:"cpu_sys_pct"`
	RSSBytes uint64  `json:"rss_bytes"`
	Threads  int     `json:"threads"`
	// FDs is the number of open descriptors, -1 when unreadable.
	FDs           int     `json:"fds"`
	FDLimit       int64   `json:"fd_limit"`
	WakeupsPerSec float64 `json:"wakeups_per_sec"`
}

// Report is the outcome of Run: discovery facts, /proc over the window
// and, when a runtime source was found, the runtime window and goroutine
// dump.
type Report struct {
	Facts *goruntime.Facts `json:"facts"`
	Proc  *ProcView        `json:"proc,omitempty"`
	// Source and SourceAddr name the runtime source ("" when none).
	Source     string `json:"source,omitempty"`
	SourceAddr string `json:"source_addr,omitempty"`
	// Info is the agent's self-description (agent sources only).
	Info   map[string]string        `json:"agent_info,omitempty"`
	Window *goruntime.Window        `json:"window,omitempty"`
	Dump   *goruntime.GoroutineDump `json:"goroutines,omitempty"`
	// Books is the runtime's own books read from the process's memory at
	// the window's end, for any Go program gosleuth may read.
	Books *Books `json:"runtime_books,omitempty"`
	// Notes say what was ignored or could not be read; Hint how to get more.
	Notes []string `json:"notes,omitempty"`
	// TraceErr says why the execution trace asked for was not written.
	TraceErr error  `json:"-"`
	Hint     string `json:"hint,omitempty"`
}

// Run discovers process opts.PID, connects to a runtime source when
// there is one, and samples it and /proc at the start and end of the
// window. Without a runtime source it still returns the discovery and
// /proc facts, with a hint on how to get more. Errors are returned for a
// missing process, an unreachable or invalid explicit URL, or a source that
// fails mid-window.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Groups == 0 {
		opts.Groups = 10
	}
	facts, err := goruntime.Discover(opts.ProcRoot, opts.PID)
	if err != nil {
		return nil, err
	}
	r := &Report{Facts: facts}
	pr, perr := proc.NewReader(proc.Options{Root: opts.ProcRoot, PIDs: []int{opts.PID}})
	var wb *window.Builder
	if perr == nil {
		defer pr.Close()
		wb = window.NewBuilder(pr, window.Config{PIDs: []int{opts.PID}, ProcRoot: opts.ProcRoot, NoFacts: true})
		if _, err := wb.Read(); err != nil {
			perr = err
		}
	}
	if perr != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("/proc sampling unavailable: %v", perr))
	}
	var src goruntime.Source
	if facts.IsGo || opts.PprofURL != "" || opts.MetricsURL != "" {
		var notes []string
		src, notes, err = goruntime.Connect(ctx, opts.PID, goruntime.Options{ProcRoot: opts.ProcRoot, PprofURL: opts.PprofURL,
			MetricsURL: opts.MetricsURL, AgentDirs: opts.AgentDirs, Facts: facts})
		r.Notes = append(r.Notes, notes...)
		if err != nil && !errors.Is(err, goruntime.ErrNoSource) {
			return nil, err
		}
	}
	// The runtime's books in memory, whatever the source: from the memory
	// source itself, else opened beside the agent or URL (its goroutine
	// dump then comes from memory too, without stopping the process).
	var books *gomem.Process
	if mr, ok := src.(goruntime.MemoryReader); ok {
		books = mr.Process()
	} else if facts.IsGo && opts.PprofURL == "" && opts.MetricsURL == "" {
		p, err := gomem.Open(proc.NewFS(opts.ProcRoot), opts.PID)
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("runtime books not read from memory: %v", err))
		} else {
			books = p
			defer p.Close()
		}
	}
	if src != nil {
		defer src.Close()
		r.Source, r.SourceAddr = src.Kind(), src.Addr()
		if a, ok := src.(interface{ Info() map[string]string }); ok {
			r.Info = a.Info()
		}
	} else {
		switch {
		case facts.ExeUnreadable:
			r.Hint = "the executable is unreadable: run gosleuth as the process's user or as root to see whether it is Go; only /proc facts are shown"
		case !facts.IsGo:
			r.Hint = "not a Go program (no Go build information in its executable): only /proc facts are shown"
		default:
			r.Hint = "no runtime source: import github.com/gosleuth/gosleuth/agent (defer agent.Start(agent.Options{})()), or pass --pprof-url for a net/http/pprof endpoint or --metrics-url for a Prometheus /metrics page"
		}
	}
	var a, b *goruntime.Sample
	if src != nil {
		if a, err = src.Read(ctx); err != nil {
			return nil, fmt.Errorf("read %s source at %s: %w", src.Kind(), src.Addr(), err)
		}
	}
	t := time.NewTimer(opts.Duration)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		r.Notes = append(r.Notes, "window cut short by interruption")
	}
	// The window's end is read even after an interruption.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	// The books and the goroutine dump from memory are read before the
	// window's last sample, so what the runtime window counts covers the
	// time the process was watched.
	dumped := false
	if books != nil {
		c, err := books.Census(gomem.CensusOptions{})
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("runtime books: %v", err))
		} else {
			r.Books = readBooks(books, c, opts.Groups)
			if opts.Groups > 0 && !opts.DumpFromSource {
				// The dump from memory costs the process nothing: no
				// bound.
				d := goruntime.DumpFromCensus(c)
				if len(d.Groups) > opts.Groups {
					d.Groups = d.Groups[:opts.Groups]
				}
				r.Dump, dumped = d, true
			}
		}
	}
	if src != nil {
		b, err = src.Read(endCtx)
		if err != nil {
			return nil, fmt.Errorf("read %s source at %s: %w", src.Kind(), src.Addr(), err)
		}
		r.Window = window.RuntimeBetween(a, b)
		if src.Kind() == "prometheus" && r.Window.Known.Has(goruntime.KnownSchedLatency) {
			r.Window.Notes = append(r.Window.Notes, "client_golang exports scheduling latency in coarse buckets (about 11x apart): p50 and p99 are bucket upper bounds")
		}
	}
	if perr == nil {
		if _, err := wb.Read(); err == nil {
			r.Proc = procView(wb.Window(opts.PID))
		}
	}
	if opts.TracePath != "" {
		note, err := saveTrace(endCtx, src, opts.TracePath)
		r.Notes = append(r.Notes, note)
		r.TraceErr = err
	}
	dumpMax := opts.DumpMax
	if dumpMax == 0 {
		dumpMax = DefaultDumpMax
	}
	tooMany := b != nil && b.Known.Has(goruntime.KnownGoroutines) && dumpMax > 0 && b.Goroutines > uint64(dumpMax)
	if dumped {
		return r, nil
	}
	if src != nil && opts.Groups > 0 && tooMany {
		r.Notes = append(r.Notes, fmt.Sprintf("goroutine dump skipped: %d goroutines; the dump would stop the process for about %d ms (pass --dump-max %d to take it anyway)",
			b.Goroutines, b.Goroutines*3/1000, b.Goroutines))
	}
	if src != nil && opts.Groups > 0 && !tooMany {
		d, err := src.Goroutines(endCtx)
		switch {
		case errors.Is(err, goruntime.ErrUnsupported):
			r.Notes = append(r.Notes, err.Error())
		case err != nil:
			r.Notes = append(r.Notes, fmt.Sprintf("goroutine dump: %v", err))
		default:
			if len(d.Groups) > opts.Groups {
				d.Groups = d.Groups[:opts.Groups]
			}
			r.Dump = d
		}
	}
	return r, nil
}

// DefaultDumpMax is the most goroutines inspect dumps by default: a full
// goroutine dump (debug=2) stops the target's world for about 3 µs per
// goroutine (measured: 400-600 ms at 200k), so at this count it stays
// under about 6 ms.
const DefaultDumpMax = 2000

// saveTrace writes the source's FlightRecorder snapshot to path and says
// what happened.
func saveTrace(ctx context.Context, src goruntime.Source, path string) (string, error) {
	fr, ok := src.(goruntime.FlightRecorder)
	if !ok {
		err := errors.New("no execution trace: it needs the gosleuth agent with Options.FlightRecorder")
		return err.Error(), err
	}
	b, err := fr.FlightRecording(ctx)
	if err != nil {
		err = fmt.Errorf("no execution trace: %w", err)
		return err.Error(), err
	}
	if err := atomicfile.WriteBytes(path, b); err != nil {
		err = fmt.Errorf("no execution trace: %w", err)
		return err.Error(), err
	}
	return fmt.Sprintf("execution trace of the last seconds written to %s (%d bytes): go tool trace %s", path, len(b), path), nil
}

// procView is the figures of the process's window, nil when it exited.
func procView(w *window.Window) *ProcView {
	if w == nil || w.Exited || len(w.Series) == 0 || w.Seconds() <= 0 {
		return nil
	}
	last := w.Series[len(w.Series)-1]
	fds := int(last.FDs)
	if !w.FDsKnown {
		fds = -1
	}
	limit := w.FDLimit
	if limit < 0 {
		limit = proc.Unlimited
	}
	sec := w.Seconds()
	return &ProcView{Seconds: sec, UserPct: 100 * w.UserSec / sec, SysPct: 100 * w.SysSec / sec,
		RSSBytes: last.RSS, Threads: int(last.Threads), FDs: fds, FDLimit: limit,
		WakeupsPerSec: w.WakeupsPerSec()}
}
