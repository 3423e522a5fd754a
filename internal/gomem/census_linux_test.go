//go:build linux

package gomem

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gosleuth/gosleuth/internal/proc"
	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// censusPatient runs testdata/census built with flags and returns its PID
// and the address it serves pprof on.
func censusPatient(t *testing.T, flags ...string) (int, string) {
	t.Helper()
	testenv.Require(t, testenv.Linux, testenv.AMD64)
	return runCensus(t, testbin.BuildWith(t, "./testdata/census", flags...))
}

// debug1Counts parses a goroutine profile with debug=1 into the count of
// goroutines per innermost main.* function.
func debug1Counts(t *testing.T, b []byte) map[string]int {
	t.Helper()
	out := map[string]int{}
	head := regexp.MustCompile(`^(\d+) @`)
	frame := regexp.MustCompile(`^#\s+0x[0-9a-f]+\s+(\S+)\+0x`)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if m := head.FindStringSubmatch(l); m != nil {
			n, _ = strconv.Atoi(m[1])
			continue
		}
		if m := frame.FindStringSubmatch(l); m != nil && n > 0 && strings.HasPrefix(m[1], "main.") {
			out[m[1]] += n
			n = 0
		}
	}
	return out
}

// TestCensusMatchesGoroutineProfile: the census's unwound stacks, counted
// by their innermost main.* function, equal the program's own goroutine
// profile taken right after (the patient starts and ends no goroutine
// once it serves); so do the groups by start function.
func TestCensusMatchesGoroutineProfile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"dwarf", nil},
		{"pie", []string{"-buildmode=pie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, addr := censusPatient(t, tc.flags...)
			p, err := Open(proc.FS{}, pid)
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.Census(CensusOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Counts only: the same totals from sched.ngsys, without
			// the function table.
			cc, err := p.Census(CensusOptions{Counts: true})
			if err != nil {
				t.Fatal(err)
			}
			if cc.Total != c.Total || len(cc.Groups) != 0 {
				t.Errorf("counts only: %d goroutines, %d groups; the census: %d", cc.Total, len(cc.Groups), c.Total)
			}
			theirs := debug1Counts(t, testbin.Fetch(t, "http://"+addr+"/debug/pprof/goroutine?debug=1"))
			ours := map[string]int{}
			for _, s := range c.Stacks {
				for _, f := range s.Frames {
					if strings.HasPrefix(f.Func, "main.") {
						ours[f.Func] += s.Count
						break
					}
				}
			}
			want := map[string]int{"main.receiver": 300, "main.sleeper": 120, "main.selecter": 40, "main.locker": 7}
			for fn, n := range want {
				if theirs[fn] != n {
					t.Errorf("the program's profile has %d goroutines in %s, the patient parks %d", theirs[fn], fn, n)
				}
				if ours[fn] != theirs[fn] {
					t.Errorf("%s: census unwound %d goroutines, the program's profile says %d", fn, ours[fn], theirs[fn])
				}
			}
			starts := map[string]int{}
			states := map[string]map[string]int{}
			for _, g := range c.Groups {
				starts[g.Start.Func] += g.Count
				if states[g.Start.Func] == nil {
					states[g.Start.Func] = map[string]int{}
				}
				states[g.Start.Func][g.State] += g.Count
			}
			for fn, n := range want {
				if starts[fn] != n {
					t.Errorf("census: %d goroutines started at %s, want %d", starts[fn], fn, n)
				}
			}
			for fn, st := range map[string]string{"main.receiver": "chan receive", "main.sleeper": "sleep",
				"main.selecter": "select", "main.locker": "sync.Mutex.Lock"} {
				if states[fn][st] != want[fn] {
					t.Errorf("census: %s's goroutines by state %v, want %d in %q", fn, states[fn], want[fn], st)
				}
			}
			if c.StackBytes < uint64(c.Total)*2048 {
				t.Errorf("census: %d goroutines hold %d stack bytes, less than the 2 KiB minimum each", c.Total, c.StackBytes)
			}
			// The patient started 468 goroutines of its own, plus the
			// runtime's and net/http's.
			if !c.CreatedKnown || c.Created < 468 || c.Created > 520 {
				t.Errorf("census: created %d (known %v), want 468 and a few of the runtime's", c.Created, c.CreatedKnown)
			}
		})
	}
}

// rtm reads the patient's runtime/metrics.
func rtm(t *testing.T, addr string) map[string]uint64 {
	m := map[string]uint64{}
	if err := json.Unmarshal(testbin.Fetch(t, "http://"+addr+"/rtm"), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestStatsMatchRuntimeMetrics: GC count, heap live, heap goal, GOGC and
// the memory limit read from memory equal runtime/metrics read by the
// program in the same GC cycle.
func TestStatsMatchRuntimeMetrics(t *testing.T) {
	pid, addr := censusPatient(t)
	p, err := Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		m := rtm(t, addr)
		if uint64(st.GCCycles) != m["/gc/cycles/total:gc-cycles"] && try < 3 {
			continue // a cycle ended in between
		}
		checks := []struct {
			name      string
			got, want uint64
		}{
			{"GC cycles", uint64(st.GCCycles), m["/gc/cycles/total:gc-cycles"]},
			{"heap goal", st.HeapGoal, m["/gc/heap/goal:bytes"]},
			{"heap live", st.HeapMarked, m["/gc/heap/live:bytes"]},
			{"GOGC", uint64(st.GOGC), m["/gc/gogc:percent"]},
			{"memory limit", uint64(st.MemoryLimit), m["/gc/gomemlimit:bytes"]},
			{"GOMAXPROCS", uint64(st.GOMAXPROCS), m["/sched/gomaxprocs:threads"]},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%s: read %d, runtime/metrics %d", c.name, c.got, c.want)
			}
		}
		if st.GCCycles < 2 || st.GCTotal <= 0 || st.CPUTotal <= st.GCTotal {
			t.Errorf("GC CPU: %d cycles, GC %v of %v", st.GCCycles, st.GCTotal, st.CPUTotal)
		}
		if len(st.Missing) > 0 {
			t.Errorf("missing: %v", st.Missing)
		}
		var ticker bool
		for _, pt := range st.Periodic {
			if pt.Period == 3*time.Millisecond && pt.Func == "time.sendTime" {
				ticker = true
			}
		}
		if !ticker {
			t.Errorf("the patient's 3 ms ticker not among the periodic timers %+v", st.Periodic)
		}
		return
	}
}

// stackKey names a sample's stack by its functions, innermost first.
func stackKey(s *profile.Sample) string {
	var b strings.Builder
	for _, l := range s.Location {
		for _, ln := range l.Line {
			b.WriteString(ln.Function.Name + ";")
		}
	}
	return b.String()
}

// TestHeapProfileMatchesPprof: the heap profile read from memory has the
// same stacks and the same counts as the program's own /debug/pprof/heap
// (both read the same buckets; the patient allocates nothing meanwhile).
func TestHeapProfileMatchesPprof(t *testing.T) {
	pid, addr := censusPatient(t)
	p, err := Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.HeapProfile()
	if err != nil {
		t.Fatal(err)
	}
	ours := p.Pprof(h)
	theirs, err := profile.ParseData(testbin.Fetch(t, "http://"+addr+"/debug/pprof/heap"))
	if err != nil {
		t.Fatal(err)
	}
	if ours.Period != theirs.Period || ours.Period != 4096 {
		t.Errorf("period %d, the program's %d, want 4096", ours.Period, theirs.Period)
	}
	sum := func(pr *profile.Profile) map[string][4]int64 {
		out := map[string][4]int64{}
		for _, s := range pr.Sample {
			k := stackKey(s)
			v := out[k]
			for i := range v {
				v[i] += s.Value[i]
			}
			out[k] = v
		}
		return out
	}
	a, b := sum(ours), sum(theirs)
	// The program's own request (serving /debug/pprof/heap) may have
	// added stacks of net/http since: compare on the patient's stacks.
	n := 0
	for k, v := range b {
		if !strings.Contains(k, "main.") {
			continue
		}
		n++
		if a[k] != v {
			t.Errorf("stack %s: read %v, the program's profile %v", k, a[k], v)
		}
	}
	if n < 2 {
		t.Fatalf("the program's heap profile has %d stacks through main: want the cache and the churn", n)
	}
	var fill bool
	for k, v := range a {
		if strings.Contains(k, "main.fill") && v[2] > 10000 {
			fill = true
		}
	}
	if !fill {
		t.Errorf("main.fill's 20,000 live entries not in the profile read")
	}
	if t.Failed() {
		for k, v := range a {
			t.Logf("read %s %v", k, v)
		}
	}
}

// TestCountsNeedNoFunctionTable: a census of counts and the statistics
// without timer names read nothing of the executable's function table (a
// reader of every Go process of a host must not load each one's), and a
// full census does.
func TestCountsNeedNoFunctionTable(t *testing.T) {
	pid, _ := censusPatient(t)
	p, err := Open(proc.FS{}, pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Census(CensusOptions{Counts: true}); err != nil {
		t.Fatal(err)
	}
	st, err := p.StatsCounts()
	if err != nil {
		t.Fatal(err)
	}
	if p.bin != nil {
		t.Errorf("counts and statistics loaded the function table")
	}
	if len(st.Periodic) == 0 || st.Periodic[0].Func != "?" {
		t.Errorf("periodic timers without names: %+v", st.Periodic)
	}
	if _, err := p.Census(CensusOptions{}); err != nil || p.bin == nil {
		t.Errorf("a census with names: %v, function table loaded %v", err, p.bin != nil)
	}
}
