package doctor

import "slices"

// Triage is the step of a whole-host run that picks, from the windows of
// its first part, the at most n processes worth a close look (stack
// samples, syscall counters, runtime metrics): those a /proc rule flags and
// the Go processes with non-trivial CPU or wake-ups, busiest first.
func Triage(ws []*Window, h *Host, n int) []*Window {
	type scored struct {
		w     *Window
		score float64
	}
	var c []scored
	for _, w := range ws {
		found, _ := Evaluate(w, h)
		score := 0.0
		for _, f := range found {
			score += float64(1+f.Severity) * 10
		}
		if w.IsGo() && (w.Cores() >= 0.01 || w.WakeupsPerSec() >= 50) {
			score += 5
		}
		if score == 0 {
			continue
		}
		score += w.Cores() + w.WakeupsPerSec()/1000
		c = append(c, scored{w, score})
	}
	slices.SortFunc(c, func(a, b scored) int {
		if a.score > b.score {
			return -1
		}
		if a.score < b.score {
			return 1
		}
		return a.w.PID - b.w.PID
	})
	var out []*Window
	for i := 0; i < len(c) && i < n; i++ {
		out = append(out, c[i].w)
	}
	return out
}
