package compare

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// wakeupData makes n rounds of one A and one B window each: a cost shared
// by every process that moves from window to window (log sd 3%), which
// CPU follows at slope 0.5 and the probe at 1 with noise of its own (log
// sd 0.5%), and a CPU window noise of its own (log sd 0.5%). B's CPU is
// effect times A's; its probe is probeEffect times A's.
func wakeupData(n int, effect, probeEffect float64, seed uint64) []Window {
	rng := rand.New(rand.NewPCG(seed, seed))
	var ws []Window
	for k := range n {
		for _, side := range []int{0, 1} {
			shared := 0.03 * rng.NormFloat64()
			cpu := math.Log(25) + 0.5*shared + 0.005*rng.NormFloat64()
			probe := math.Log(4000) + shared + 0.005*rng.NormFloat64()
			if side == 1 {
				cpu += math.Log(effect)
				probe += math.Log(probeEffect)
			}
			ws = append(ws, Window{Index: len(ws), Side: side, Kind: kindCPU, Life: len(ws) + 1, Round: k + 1,
				Values: map[string]float64{metricCPU.Name: math.Exp(cpu), wakeupCostKey: math.Exp(probe)}})
		}
	}
	return ws
}

func TestWakeupAdjust(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	noProbe := wakeupData(10, 1.03, 1, 7)
	for i := range noProbe {
		delete(noProbe[i].Values, wakeupCostKey)
	}
	// CPU that falls as the probe's cost rises: the slope is not used.
	against := wakeupData(10, 1.03, 1, 7)
	for i := range against {
		against[i].Values[wakeupCostKey] = 1e7 / against[i].Values[wakeupCostKey]
	}
	for _, tc := range []struct {
		name string
		ws   []Window
		used bool
		why  string // in Why when not used
	}{
		{"3% under a shared cost", wakeupData(10, 1.03, 1, 7), true, ""},
		{"a side that moves the probe", wakeupData(10, 1.03, 1.2, 7), false, "moved the probe"},
		{"CPU against the probe", against, false, "did not rise"},
		{"no probe", noProbe, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Analyze(two, tc.ws, []Metric{metricCPU}, Options{})[0].Comparisons[0]
			if !c.Paired {
				t.Fatalf("not paired (p %v)", c.P)
			}
			w := c.Wakeup
			if tc.name == "no probe" {
				if w != nil {
					t.Fatalf("adjusted without a probe: %+v", w)
				}
				return
			}
			if w == nil || w.Used != tc.used || !strings.Contains(w.Why, tc.why) {
				t.Fatalf("adjustment %+v, want used %v (why containing %q)", w, tc.used, tc.why)
			}
			adjusted := c.Ratio.Method == "hodges-lehmann-paired-log-wakeup-adjusted"
			if adjusted != tc.used || tc.used && c.P != w.P {
				t.Errorf("ratio %+v and p %v (raw pairs' %v) with the adjustment used %v", c.Ratio, c.P, w.Unadjusted, tc.used)
			}
		})
	}
}

// TestWakeupAdjustPower: over 200 runs of a 3% change under the shared
// cost, at 0.0125 (CPU's share of the level in a default run under load),
// the adjusted pairs call it worse in at least 90% of runs and the slope
// is found near its true 0.5.
func TestWakeupAdjustPower(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	const runs = 200
	caught, raw := 0, 0
	var slopes []float64
	for i := range runs {
		c := Analyze(two, wakeupData(10, 1.03, 1, uint64(5000+i)), []Metric{metricCPU}, Options{Alpha: 0.0125})[0].Comparisons[0]
		if c.Verdict == Worse {
			caught++
		}
		if c.Wakeup == nil {
			t.Fatalf("run %d: no adjustment", i)
		}
		// The raw pairs at the same level.
		if c.Wakeup.Unadjusted <= 0.0125 {
			raw++
		}
		slopes = append(slopes, c.Wakeup.Slope)
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

// TestWakeupAdjustFalseAlarms runs the adjusted test on 400 runs of the
// same program under the shared cost: its p falls at or below 0.05 in
// about 5% of runs, as an exact test's does (the slope is fitted on the
// same windows, so this is checked, not assumed), and no run is called
// worse or better.
func TestWakeupAdjustFalseAlarms(t *testing.T) {
	two := []Side{{Name: "A"}, {Name: "B"}}
	alarms, used, low, rawLow := 0, 0, 0, 0
	const runs = 400
	for i := range runs {
		c := Analyze(two, wakeupData(10, 1, 1, uint64(1000+i)), []Metric{metricCPU}, Options{})[0].Comparisons[0]
		if c.Wakeup == nil || !c.Wakeup.Used {
			continue
		}
		used++
		if c.P <= 0.05 {
			low++
		}
		if c.Wakeup.Unadjusted <= 0.05 {
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
	// 1.1% at 380 runs): 5% + 3 sd.
	if float64(low) > 0.085*float64(used) {
		t.Errorf("adjusted p at most 0.05 in %d of %d runs (the raw pairs' in %d)", low, used, rawLow)
	}
	if alarms > 0 {
		t.Errorf("%d of %d runs called better or worse", alarms, used)
	}
	t.Logf("%d of %d runs adjusted; p at most 0.05 in %d of them (the raw pairs' in %d); %d alarms", used, runs, low, rawLow, alarms)
}
