//go:build !linux

package export

import "time"

// tickTimer is a runtime timer where there is no timerfd.
type tickTimer struct {
	t *time.Timer
	c chan struct{}
}

func newTickTimer() (*tickTimer, error) {
	t := &tickTimer{c: make(chan struct{}, 1)}
	t.t = time.AfterFunc(time.Hour, func() {
		select {
		case t.c <- struct{}{}:
		default:
		}
	})
	t.t.Stop()
	return t, nil
}

// C receives a value when the timer fires.
func (t *tickTimer) C() <-chan struct{} { return t.c }

// reset arms the timer to fire once after d.
func (t *tickTimer) reset(d time.Duration) error { t.t.Reset(d); return nil }

// stop releases the timer.
func (t *tickTimer) stop() { t.t.Stop() }
