package export

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/gosleuth/gosleuth/internal/doctor"
	"github.com/gosleuth/gosleuth/internal/window"
)

// FindingSeries is one doctor finding that holds, as exported.
type FindingSeries struct {
	ID, Severity string
	PID          int
	Comm         string
	Kind, Name   string // the process's group
	Cores        float64
}

// DoctorConfig runs the doctor over the whole host every Every, with a
// window of Window and at most MaxLooks close looks (as a whole-host run).
type DoctorConfig struct {
	Every    time.Duration
	Window   time.Duration
	MaxLooks int
	Looks    []window.Look
}

// RunDoctor diagnoses the host every cfg.Every until ctx ends; each run
// replaces the findings exported. A failed run keeps the previous findings
// and counts an error.
func (e *Exporter) RunDoctor(ctx context.Context, cfg DoctorConfig) {
	if cfg.Window <= 0 {
		cfg.Window = 10 * time.Second
	}
	for {
		e.diagnose(ctx, cfg)
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.Every):
		}
	}
}

func (e *Exporter) diagnose(ctx context.Context, cfg DoctorConfig) {
	start := time.Now()
	// The findings' CPU is the processes' own, measured before and after
	// the close looks, as the doctor command's is (QuietCPU).
	ws, host, notes, err := window.Collect(ctx, window.CollectConfig{Duration: cfg.Window, ProcRoot: e.cfg.ProcRoot, Triage: doctor.Triage,
		Looks: cfg.Looks, MaxLooks: cfg.MaxLooks, QuietCPU: true})
	if err != nil {
		if ctx.Err() == nil {
			e.mu.Lock()
			e.doctorErrors++
			e.mu.Unlock()
		}
		return
	}
	rep := doctor.Diagnose(ws, host, notes, false)
	out := []FindingSeries{} // not nil: an empty run replaces the last one
	for _, p := range rep.Processes {
		for _, f := range p.Findings {
			// The group is filled in by the sampler, which owns the
			// PID-to-group map.
			out = append(out, FindingSeries{ID: f.ID, Severity: f.Severity.String(), PID: p.PID, Comm: p.Comm, Cores: f.Cores})
		}
	}
	e.mu.Lock()
	e.newFindings = out
	e.doctorRuns++
	e.doctorSeconds = time.Since(start).Seconds()
	e.mu.Unlock()
	// A doctor pass symbolizes the binaries it looks at and holds their
	// stacks: ~25 MB for a few seconds every --doctor-every, which the
	// runtime would hand back to the kernel only over minutes. The
	// exporter lives between passes on ~20 MB: give the rest back now.
	debug.FreeOSMemory()
}
