package web

import (
	"sync"
	"time"
)

// life runs a sampler while viewers hold it: the first viewer starts it,
// and it stops linger after the last one left unless one came back. Its
// mutex also guards the owner's state.
type life struct {
	mu      sync.Mutex
	viewers int
	running bool
	stopc   chan struct{}
	timer   *time.Timer
	changed chan struct{} // closed and replaced when something new is recorded
	used    time.Time     // last time a viewer came or went
}

// acquireLocked registers a viewer and, when ok, starts run in a goroutine
// if it is not running. l.mu is held.
func (l *life) acquireLocked(ok bool, wg *sync.WaitGroup, run func(stopc chan struct{})) {
	l.viewers++
	l.used = time.Now()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if !l.running && ok {
		l.running = true
		l.stopc = make(chan struct{})
		wg.Add(1)
		go func(c chan struct{}) {
			defer wg.Done()
			run(c)
		}(l.stopc)
	}
}

// release unregisters a viewer.
func (l *life) release(linger time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.viewers--
	l.used = time.Now()
	if l.viewers > 0 || !l.running {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = time.AfterFunc(linger, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.viewers == 0 {
			l.stopLocked()
		}
	})
}

// stopLocked stops the sampler. l.mu is held.
func (l *life) stopLocked() {
	if l.running {
		close(l.stopc)
		l.running = false
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// notifyLocked wakes the viewers waiting for news. l.mu is held.
func (l *life) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// wait returns the channel closed at the next news.
func (l *life) wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}
