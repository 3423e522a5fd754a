package probe

import (
	"strings"
	"testing"
)

// TestMutexOf: each semaphore a goroutine parks on names its mutex, at the
// semaphore's offset in sync.Mutex and sync.RWMutex; other functions name
// none.
func TestMutexOf(t *testing.T) {
	const rw = 0xc000010000
	tests := []struct {
		fn   string
		sema uint64
		want uint64
		ok   bool
	}{
		{SemacquireMutex, rw + 4, rw, true},
		{"internal/sync.runtime_SemacquireMutex", rw + 4, rw, true},
		{SemacquireRWMutex, rw + 8, rw, true},
		{SemacquireRWMutexR, rw + 12, rw, true},
		{SemacquireRWMutexR, 4, 0, false},
		{"sync.runtime_SemacquireWaitGroup", rw, 0, false},
	}
	for _, tt := range tests {
		if got, ok := MutexOf(tt.fn, tt.sema); got != tt.want || ok != tt.ok {
			t.Errorf("MutexOf(%s, %#x) = %#x, %v; want %#x, %v", tt.fn, tt.sema, got, ok, tt.want, tt.ok)
		}
	}
}

// TestAnswerLocks: the parks lead, summed over the park functions, with
// each one's caller and mutex.
func TestAnswerLocks(t *testing.T) {
	r := &Result{Funcs: []FuncStat{
		{Func: SemacquireMutex, Count: 3000, PerSec: 1500, Callers: []Caller{{Func: "main.(*table).add", File: "t.go", Line: 7, Share: 1}}, Args: []ArgVal{{Value: 0x1004, Share: 1}}},
		{Func: SemacquireRWMutexR, Count: 0},
		{Func: SemacquireRWMutex, Skipped: "not in the binary"},
		{Func: "sync.(*Mutex).lockSlow", Skipped: "too hot to probe"},
	}}
	ans := answerLocks(r)
	if len(ans) != 2 || !strings.Contains(ans[0], "1500 times a second") ||
		!strings.Contains(ans[1], "main.(*table).add (t.go:7)") || !strings.Contains(ans[1], "mutex at 0x1000") {
		t.Errorf("answer %q", ans)
	}
	if ans := answerLocks(&Result{Funcs: []FuncStat{{Func: SemacquireMutex}, {Func: "sync.(*Mutex).lockSlow"}}}); len(ans) != 1 || !strings.HasPrefix(ans[0], "no mutex contention") {
		t.Errorf("no contention: %q", ans)
	}
}

// TestEntryOf: a goroutine's entry is the frame just inside
// runtime.goexit; a stack cut short of it has none.
func TestEntryOf(t *testing.T) {
	tests := []struct {
		stack []string
		want  string
	}{
		{[]string{"runtime.chansend1", "main.(*Notifier).deliver", "main.(*Notifier).Publish.gowrap1", "runtime.goexit"}, "main.(*Notifier).Publish.gowrap1"},
		{[]string{"main.main.func14.1", "runtime.goexit"}, "main.main.func14.1"},
		{[]string{"internal/poll.runtime_pollWait", "internal/poll.(*pollDesc).wait", "net.(*conn).Read"}, ""},
		{[]string{"runtime.goexit"}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		if got := EntryOf(tt.stack); got != tt.want {
			t.Errorf("EntryOf(%q) = %q, want %q", tt.stack, got, tt.want)
		}
	}
}

// TestAnswerParks: the parks by site, each with the function its
// goroutines started in when the stack reached it.
func TestAnswerParks(t *testing.T) {
	r := &Result{Funcs: []FuncStat{{Func: Gopark, Count: 760, PerSec: 380, Callers: []Caller{
		{Func: "main.(*Notifier).deliver", File: "main.go", Line: 20, Share: 0.5, Stack: []string{"runtime.chansend1", "main.(*Notifier).deliver", "main.(*Notifier).Publish.gowrap1", "runtime.goexit"}},
		{Func: "net.(*netFD).Read", File: "fd_posix.go", Line: 68, Share: 0.5, Stack: []string{"internal/poll.runtime_pollWait"}},
	}}}}
	ans := answerParks(r)
	if len(ans) != 3 || !strings.Contains(ans[0], "380 times") ||
		!strings.Contains(ans[1], "190/s in main.(*Notifier).deliver (main.go:20), goroutines started in main.(*Notifier).Publish.gowrap1") ||
		strings.Contains(ans[2], "started in") {
		t.Errorf("answer %q", ans)
	}
	if ans := answerParks(&Result{Funcs: []FuncStat{{Func: Gopark}}}); ans != nil {
		t.Errorf("no parks: %q", ans)
	}
}

// TestStatementsTooHot: a recipe whose function was too hot to probe says
// it was not measured, never nothing; one whose functions ran and saw
// nothing says nothing; a function absent from the binary is not "too hot".
func TestStatementsTooHot(t *testing.T) {
	hot := "too hot to probe (≥ 3584 calls/s would cost the target 1.2% of a CPU, budget 1.0%)"
	tests := []struct {
		name   string
		recipe string
		funcs  []FuncStat
		want   string // "" for no statement
	}{
		{"files too hot", "files", []FuncStat{{Func: "os.OpenFile", Skipped: hot}}, "not measured (too hot to probe): os.OpenFile"},
		{"files quiet", "files", []FuncStat{{Func: "os.OpenFile"}}, ""},
		{"files absent", "files", []FuncStat{{Func: "os.OpenFile", Skipped: "not in the binary"}}, ""},
		{"goroutines half hot", "goroutines", []FuncStat{{Func: NewprocFunc, Skipped: hot}, {Func: GoexitFunc, Count: 10, PerSec: 5}},
			"not measured (too hot to probe): " + NewprocFunc},
	}
	for _, tt := range tests {
		got := Recipes[tt.recipe].Statements(&Result{Seconds: 2, Funcs: tt.funcs})
		joined := strings.Join(got, "\n")
		if tt.want == "" && len(got) != 0 || tt.want != "" && !strings.Contains(joined, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
