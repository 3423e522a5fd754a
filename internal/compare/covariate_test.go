package compare

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// loadData makes n rounds of one A and one B window each under load: a
// cost shared by every process that moves from window to window (log sd
// 3%), which the sides' CPU follows at slope 0.5 and the generator's at 1
// with noise of its own (log sd 0.5%), and a CPU window noise of its own
// (log sd 0.5%). B's CPU is effect times A's; the generator's CPU in B's
// windows is genEffect times its CPU in A's.
func loadData(n int, effect, genEffect float64, seed uint64) []Window {
	rng := rand.New(rand.NewPCG(seed, seed))
	var ws []Window
	for k := range n {
		for _, side := range []int{0, 1} {
			shared := 0.03 * rng.NormFloat64()
			cpu := math.Log(25) + 0.5*shared + 0.005*rng.NormFloat64()
			gen := math.Log(5) + shared + 0.005*rng.NormFloat64()
			if side == 1 {
				cpu += math.Log(effect)
				gen += math.Log(genEffect)
			}
			ws = append(ws, Window{Index: len(ws), Side: side, Kind: kindCPU, Life: len(ws) + 1, Round: k + 1,
				Values: map[string]float64{metricCPU.Name: math.Exp(cpu), loadCPUKey: math.Exp(gen)}})
		}
	}
	return ws
}

func TestLoadAdjust(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	noLoad := loadData(10, 1.03, 1, 7)
	for i := range noLoad {
		delete(noLoad[i].Values, loadCPUKey)
	}
	// CPU that falls as the generator's rises: the slope is not used.
	against := loadData(10, 1.03, 1, 7)
	for i := range against {
		against[i].Values[loadCPUKey] = 25 / against[i].Values[loadCPUKey]
	}
	for _, tc := range []struct {
		name string
		ws   []Window
		used bool
		why  string // in Why when not used
	}{
		{"3% under a shared cost", loadData(10, 1.03, 1, 7), true, ""},
		{"a side that moves the generator", loadData(10, 1.03, 1.2, 7), false, "changed the generator"},
		{"CPU against the generator", against, false, "did not rise"},
		{"no generator", noLoad, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Analyze(two, tc.ws, []Metric{metricCPU}, Options{})[0].Comparisons[0]
			if !c.Paired {
				t.Fatalf("not paired (p %v)", c.P)
			}
			w := c.Load
			if tc.name == "no generator" {
				if w != nil {
					t.Fatalf("adjusted without the generator's CPU: %+v", w)
				}
				return
			}
			if w == nil || w.Used != tc.used || !strings.Contains(w.Why, tc.why) {
				t.Fatalf("adjustment %+v, want used %v (why containing %q)", w, tc.used, tc.why)
			}
			// The p is the randomization test's whether or not the
			// observed pairs were adjusted; the ratio is the adjusted
			// pairs' only where they were.
			adjusted := c.Ratio.Method == "hodges-lehmann-paired-log-load-adjusted"
			if adjusted != tc.used || c.P != w.P || c.SignedRank.P != w.P {
				t.Errorf("ratio %+v and p %v (signed-rank %v, randomization %v, raw pairs' %v) with the adjustment used %v", c.Ratio, c.P, c.SignedRank.P, w.P, w.Unadjusted, tc.used)
			}
		})
	}
}

// TestLoadAdjustPower: over 200 runs of a 3% change under the shared
// cost, at 0.0125 (CPU's share of the level in a default run under load),
// the adjusted pairs call it worse in at least 90% of runs and the slope
// is found near its true 0.5.
func TestLoadAdjustPower(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	const runs = 200
	caught, raw := 0, 0
	var slopes []float64
	for i := range runs {
		c := Analyze(two, loadData(10, 1.03, 1, uint64(5000+i)), []Metric{metricCPU}, Options{Alpha: 0.0125})[0].Comparisons[0]
		if c.Verdict == Worse {
			caught++
		}
		if c.Load == nil {
			t.Fatalf("run %d: no adjustment", i)
		}
		// The raw pairs at the same level.
		if c.Load.Unadjusted <= 0.0125 {
			raw++
		}
		slopes = append(slopes, c.Load.Slope)
	}
	med := median(sorted(slopes))
	t.Logf("3%% called worse in %d of %d runs; raw pairs p at most the level in %d; median slope %.2f", caught, runs, raw, med)
	if caught < runs*9/10 {
		t.Errorf("3%% called worse in %d of %d runs, want at least 90%%", caught, runs)
	}
	if med < 0.4 || med > 0.6 {
		t.Errorf("median slope %.2f, want about 0.5", med)
	}
}

// TestLoadAdjustFalseAlarms runs the test on 400 runs of the same program
// under the shared cost: its p (the randomization test's, adjusted pairs
// or not) falls at or below 0.05 in about 5% of runs, as an exact test's
// does (the slope is fitted on the same windows and the rules choose
// between adjusted and raw pairs, so this is checked, not assumed), and no
// run is called worse or better.
func TestLoadAdjustFalseAlarms(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	alarms, used, low, rawLow := 0, 0, 0, 0
	const runs = 400
	for i := range runs {
		c := Analyze(two, loadData(10, 1, 1, uint64(1000+i)), []Metric{metricCPU}, Options{})[0].Comparisons[0]
		if c.Load == nil {
			t.Fatalf("run %d: no adjustment", i)
		}
		if c.Load.Used {
			used++
		}
		if c.P <= 0.05 {
			low++
		}
		if c.Load.Unadjusted <= 0.05 {
			rawLow++
		}
		if c.Verdict == Worse || c.Verdict == Better {
			alarms++
		}
	}
	if used < runs*9/10 {
		t.Errorf("adjusted in %d of %d runs", used, runs)
	}
	// At most 5% of the runs, with room for their sampling noise (sd
	// 1.1% at 400 runs): 5% + 3 sd.
	if float64(low) > 0.085*runs {
		t.Errorf("p at most 0.05 in %d of %d runs (the raw pairs' in %d)", low, runs, rawLow)
	}
	if alarms > 0 {
		t.Errorf("%d of %d runs called better or worse", alarms, runs)
	}
	t.Logf("%d of %d runs adjusted; p at most 0.05 in %d (the raw pairs' in %d); %d alarms", used, runs, low, rawLow, alarms)
}

// TestLoadReport: the text report says how CPU was tested against the
// generator's CPU, and the CPU row says its pairs were adjusted.
func TestLoadReport(t *testing.T) {
	r := &Result{Sides: []Side{{Name: "A", Command: "a"}, {Name: "B", Command: "b"}}, Windows: loadData(10, 1.03, 1, 7)}
	r.finish(Options{})
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"load cost: the load generator used 5", "CPU pairs taken net of it: CPU moved 0.", "paired, load adjusted)"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}
