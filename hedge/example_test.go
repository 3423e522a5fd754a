package hedge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/gosleuth/gosleuth/hedge"
)

// A client whose GETs are hedged with the default policy: an adaptive
// delay, a 5% budget and an in-flight cap.
func ExampleNewTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	base := &http.Transport{}
	defer base.CloseIdleConnections()
	t := hedge.NewTransport(base)
	client := &http.Client{Transport: t}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body), t.Stats().Requests)
	// Output: hello 1
}

// Hedge any call: here the first attempt stalls, so the hedge sent after
// 5 ms answers and the first attempt is cancelled.
func ExampleDo() {
	p := hedge.NewPolicy(hedge.WithDelay(5 * time.Millisecond))
	attempts := make(chan int, 2)
	attempts <- 1
	attempts <- 2
	v, err := hedge.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		if <-attempts == 1 {
			<-ctx.Done() // stalls until the hedge wins
			return "", ctx.Err()
		}
		return "answer from the hedge", nil
	})
	s := p.Stats()
	fmt.Println(v, err, s.Hedges, s.HedgesWon)
	// Output: answer from the hedge <nil> 1 1
}

// Send hedges to another replica and share one policy between a
// transport and other calls.
func ExampleWithHedgeHosts() {
	p := hedge.NewPolicy(hedge.WithPercentileDelay(0.95), hedge.WithBudget(0.03))
	t := hedge.NewTransport(http.DefaultTransport, hedge.WithPolicy(p), hedge.WithHedgeHosts("replica-b.internal:8080"))
	_ = &http.Client{Transport: t}
	fmt.Println(p.Stats().Delay)
	// Output: 10ms
}

// A POST is hedged only when it is marked safe to repeat.
func ExampleIdempotent() {
	req, _ := http.NewRequest(http.MethodPost, "http://backend.internal/lookup", nil)
	req = hedge.Idempotent(req)
	fmt.Println(req.Method)
	// Output: POST
}
