package hedge

import (
	"sync"
	"testing"
)

func TestBudgetBound(t *testing.T) {
	tests := []struct {
		ratio    float64
		burst    int
		requests int
	}{
		{0.05, 10, 10000},
		{0.01, 1, 5000},
		{0, 3, 1000},
		{0.5, 2, 1000},
	}
	for _, tt := range tests {
		b := newBudget(tt.ratio, tt.burst)
		hedges := 0
		for range tt.requests {
			b.deposit()
			// Ask for a hedge on every request: the worst case.
			if b.withdraw() {
				hedges++
			}
		}
		bound := int(tt.ratio*float64(tt.requests)) + tt.burst
		if hedges > bound {
			t.Errorf("ratio %v burst %d: %d hedges for %d requests, bound %d", tt.ratio, tt.burst, hedges, tt.requests, bound)
		}
		// The budget is also spent, not just capped: within one hedge of it.
		if hedges < bound-1 {
			t.Errorf("ratio %v burst %d: only %d hedges for %d requests, budget %d", tt.ratio, tt.burst, hedges, tt.requests, bound)
		}
	}
}

func TestBudgetConcurrent(t *testing.T) {
	const workers, per = 8, 5000
	b := newBudget(0.05, 10)
	var mu sync.Mutex
	hedges := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			n := 0
			for range per {
				b.deposit()
				if b.withdraw() {
					n++
				}
			}
			mu.Lock()
			hedges += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if bound := int(0.05*workers*per) + 10; hedges > bound {
		t.Fatalf("%d hedges for %d requests, bound %d", hedges, workers*per, bound)
	}
}

func TestBudgetRefundCapped(t *testing.T) {
	b := newBudget(0.1, 2)
	b.refund()
	if !b.withdraw() || !b.withdraw() || b.withdraw() {
		t.Fatal("a refund on a full bucket raised it above the burst")
	}
}
