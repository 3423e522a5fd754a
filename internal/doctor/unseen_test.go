package doctor

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/testbin"
	"github.com/gosleuth/gosleuth/internal/testenv"
	"github.com/gosleuth/gosleuth/internal/window"
)

// startUnseen runs testdata/unseen in the given behaviour and returns its
// pid and, for servers, its address.
func startUnseen(t *testing.T, behaviour string) (pid int, addr string) {
	t.Helper()
	testenv.Require(t, testenv.Linux)
	return startReady(t, exec.Command(testbin.Build(t, "./testdata/unseen"), behaviour), 30*time.Second)
}

// warnIDs returns the ids of the findings at warn level or above, sorted.
func warnIDs(fs []Finding) []string {
	var ids []string
	for _, f := range fs {
		if f.Severity >= Warn {
			ids = append(ids, f.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// TestUnseenPatients judges the rules on programs written apart from the
// ones they were first tuned on: each must get exactly its expected causes
// at warn level (a wrong warning is worse than a missing one), with the
// code named where stack samples can catch it, and the controls nothing
// above info.
func TestUnseenPatients(t *testing.T) {
	testenv.Require(t, testenv.Root, testenv.Tracefs)
	tests := []struct {
		behaviour string
		// load is the request rate sent to a server behaviour, 0 for none.
		load int
		warn []string
		// code: the cause named code in this function (stack samples).
		code string
		// unchecked: a rule that must be listed as undecided, not guessed.
		unchecked string
		// noSyscalls leaves the syscall counters out (tracefs could not be
		// mounted): kernel stack samples decide, at a lower confidence.
		noSyscalls bool
		// files adds the look that names the files opened (BPF on openat
		// as root); evidence is a piece of the warning's evidence text.
		files    bool
		evidence string
		// info: a rule that must fire at info level (seen, and judged
		// not to be a fault).
		info string
	}{
		{behaviour: "lock8", warn: []string{"lock-contention"}, code: "main.lockedHashing.func1"},
		{behaviour: "logger", warn: []string{"lock-contention"}, code: "main.(*logger).printf"},
		{behaviour: "pkgticker", warn: []string{"idle-wakeups"}},
		{behaviour: "afterfunc", warn: []string{"idle-wakeups"}},
		// Without the agent or a pprof URL, the goroutines are counted and
		// unwound from the process's memory: the leak's go statement is
		// named where they wait.
		{behaviour: "leak", warn: []string{"goroutine-leak"}, code: "main.leakRequests.func1.1"},
		// Stuck HTTP requests, with the agent: the dump names the go
		// statement; the connections they hold are the leak's symptom
		// (critical: the descriptor limit is minutes away).
		{behaviour: "leakhttp", warn: []string{"goroutine-leak"}, code: "main.leakHTTP.func2"},
		{behaviour: "rereadconfig", warn: []string{"file-reopen-churn"}, code: "main.(*config).load"},
		{behaviour: "rereadconfig", noSyscalls: true, warn: []string{"file-reopen-churn"}, code: "main.(*config).load"},
		{behaviour: "regexphandler", load: 1000, warn: []string{"cpu-hotspot"}, code: "main.regexpHandler"},
		{behaviour: "templatehandler", load: 1000, warn: []string{"cpu-hotspot"}, code: "main.templateHandler"},
		// Written after an outside judge's programs: a settings file read
		// per request (the path named from its openat calls), a deep copy
		// through JSON per request, and, as a control, an endpoint that
		// reads 26 /proc files per scrape (requests' own work).
		{behaviour: "settingshandler", load: 1000, files: true, warn: []string{"file-reopen-churn"}, code: "main.settingsServer.func1", evidence: "path /tmp/unseen-settings-"},
		{behaviour: "jsoncopy", load: 300, warn: []string{"cpu-hotspot"}, code: "main.snapshotCatalogue"},
		{behaviour: "procmetrics", load: 50, files: true, info: "file-reopen-churn"},
		{behaviour: "compute"},
		{behaviour: "idleserver"},
		{behaviour: "cacheserver", load: 1000},
	}
	for _, tt := range tests {
		name := tt.behaviour
		looks := []window.Look{window.SyscallsLook{}, window.StacksLook{}, window.RuntimeLook{}}
		if tt.noSyscalls {
			name += "-nosyscalls"
			looks = looks[1:]
		}
		if tt.files {
			looks = append(looks, window.FilesLook{})
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			insideSlots <- struct{}{}
			defer func() { <-insideSlots }()
			pid, addr := startUnseen(t, tt.behaviour)
			if tt.load > 0 {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go steadyLoad(ctx, "http://"+addr+"/", tt.load)
				time.Sleep(time.Second)
			}
			// Without syscall counts the kernel samples decide: a light
			// process (10% of a core) gives 20-40 in 4 s, a handful in
			// openat; the doctor's default window is 10 s.
			d := 4 * time.Second
			if tt.noSyscalls {
				d = 10 * time.Second
			}
			rep := diagnose(t, pid, d, looks...)
			for try := 0; try < 2 && lookFailed(rep); try++ {
				t.Logf("retrying: %v", rep.Notes)
				time.Sleep(3 * time.Second) // let the other tracer finish releasing
				rep = diagnose(t, pid, d, looks...)
			}
			fs := findingsOf(rep, pid)
			var classes map[string]float64
			if len(rep.Processes) > 0 {
				if classes = rep.Processes[0].StackClasses; classes != nil {
					classes["samples"] = float64(rep.Processes[0].Samples)
				}
			}
			if got := warnIDs(fs); !slices.Equal(got, tt.warn) {
				t.Fatalf("warn-level findings %v, want %v (stack classes %v):%s\nnotes: %v", got, tt.warn, classes, describe(fs), rep.Notes)
			}
			if tt.code != "" {
				named := false
				for _, f := range fs {
					for _, c := range f.Code {
						named = named || f.Severity >= Warn && c.Func == tt.code && c.File != "" && c.Line > 0
						t.Logf("code: %s", codeText(c))
					}
				}
				if !named {
					t.Errorf("no warn-level cause names %s with file:line:%s", tt.code, describe(fs))
				}
			}
			if tt.evidence != "" && !slices.ContainsFunc(fs, func(f Finding) bool {
				return f.Severity >= Warn && strings.Contains(evidenceText(f.Evidence), tt.evidence)
			}) {
				t.Errorf("no warn-level finding has %q in its evidence:%s", tt.evidence, describe(fs))
			}
			if tt.info != "" && !slices.ContainsFunc(fs, func(f Finding) bool { return f.ID == tt.info && f.Severity == Info }) {
				t.Errorf("%s not found at info level:%s", tt.info, describe(fs))
			}
			if tt.unchecked != "" && !slices.ContainsFunc(rep.Unchecked, func(u UncheckedRule) bool { return u.Rule == tt.unchecked }) {
				t.Errorf("%s not listed as unchecked: %+v", tt.unchecked, rep.Unchecked)
			}
			t.Logf("%s:%s", tt.behaviour, describe(fs))
		})
	}
}
