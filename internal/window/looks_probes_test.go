package window

import (
	"testing"

	"github.com/gosleuth/gosleuth/internal/probe"
)

// TestProbesOf: a function probed throughout keeps its exact count; one
// sampled in bursts its estimate and duty; one too hot even for bursts
// only its pre-flight rate, apart.
func TestProbesOf(t *testing.T) {
	r := &probe.Result{Seconds: 2, Funcs: []probe.FuncStat{
		{Func: "time.Sleep", Kind: "emulated", Count: 1800},
		{Func: "sync.(*Mutex).lockSlow", Symbol: "internal/sync.(*Mutex).lockSlow", Kind: "emulated", Count: 80000, PerSec: 40000,
			Sampled: &probe.Sampling{Duty: 0.2, Bursts: 9, OnSeconds: 0.4, Counted: 16000},
			Callers: []probe.Caller{{Func: "main.contend", File: "/src/c.go", Line: 78, Share: 1}}},
		{Func: "runtime.selectgo", Kind: "emulated", Skipped: "too hot to probe, even in bursts", PreflightPerSec: 900000},
	}}
	p := ProbesOf(r)
	tests := []struct {
		fn        string
		rate      float64
		probed    bool
		duty      float64
		preflight float64
	}{
		{"time.Sleep", 900, true, 0, 0},
		{"sync.(*Mutex).lockSlow", 40000, true, 0.2, 0},
		{"internal/sync.(*Mutex).lockSlow", 40000, true, 0.2, 0},
		{"runtime.selectgo", 0, false, 0, 900000},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			rate, ok := p.Rate(tt.fn)
			if ok != tt.probed || rate != tt.rate {
				t.Errorf("rate %v (%v), want %v (%v)", rate, ok, tt.rate, tt.probed)
			}
			if d := p.Calls[tt.fn].Duty; d != tt.duty {
				t.Errorf("duty %v, want %v", d, tt.duty)
			}
			if pre, _ := p.PreflightRate(tt.fn); pre != tt.preflight {
				t.Errorf("pre-flight rate %v, want %v", pre, tt.preflight)
			}
		})
	}
	if c := p.Calls["sync.(*Mutex).lockSlow"]; len(c.Callers) != 1 || c.Callers[0].Line != 78 {
		t.Errorf("sampled callers %+v: want main.contend:78", c.Callers)
	}
}
