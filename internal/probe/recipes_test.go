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
