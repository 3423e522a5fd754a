package window

import (
	"testing"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

// TestWaitGroupIsNotALock: a stack parked in sync.WaitGroup.Wait reaches
// the same runtime semaphore as a mutex's slow path, but is not lock
// contention; a mutex's slow path is.
func TestWaitGroupIsNotALock(t *testing.T) {
	for _, tt := range []struct {
		name   string
		frames []string
		lock   bool
	}{
		{"mutex", []string{"runtime.semacquire1", "internal/sync.runtime_SemacquireMutex", "internal/sync.(*Mutex).lockSlow", "main.worker"}, true},
		{"rwmutex", []string{"runtime.semacquire1", "sync.runtime_SemacquireRWMutexR", "sync.(*RWMutex).RLock", "main.reader"}, true},
		{"waitgroup wait", []string{"runtime.semacquire1", "sync.runtime_SemacquireWaitGroup", "sync.(*WaitGroup).Wait", "main.fanout"}, false},
		{"waitgroup done", []string{"runtime.semrelease1", "sync.runtime_Semrelease", "sync.(*WaitGroup).Add", "sync.(*WaitGroup).Done", "main.job"}, false},
	} {
		var fs []stacks.SymFrame
		for _, f := range tt.frames {
			fs = append(fs, stacks.SymFrame{Frame: stacks.Frame{Func: f}})
		}
		lock := false
		for _, f := range fs {
			lock = lock || isLockFrame(f.Func) && !waitGroupStack(fs)
		}
		if lock != tt.lock {
			t.Errorf("%s: counted as a lock %v, want %v", tt.name, lock, tt.lock)
		}
	}
}
