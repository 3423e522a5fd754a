// Package hedge sends hedged requests: when a call has not answered after
// a delay, it sends the same call again, takes the first answer and
// cancels the other. This cuts the latency tail caused by a slow replica,
// a GC pause or a lost packet, at the price of a few percent more
// requests ("The Tail at Scale", Dean and Barroso, 2013).
//
// Hedging can also turn a busy backend into a collapsed one, since every
// extra request adds load just when the backend is slowest. A Policy
// therefore bounds the extra load in five ways:
//
//   - a budget: extra attempts never exceed a ratio (default 5%) of the
//     real requests plus a small burst, counted on real traffic;
//   - a cap on extra attempts in flight at once;
//   - a switch-off: hedging pauses while the primaries' error rate or their
//     share of 429 and 503 answers rises, or while their median latency
//     shifts well above its long-run value (queueing, not a tail), and
//     resumes when the backend settles; a Retry-After on a 429 or 503
//     pauses it for that long;
//   - a win-rate switch: hedging also pauses while fewer than one hedge
//     in ten answers before its primary (near capacity a hedge only
//     queues behind it), and a trickle of probe hedges tells when hedges
//     win again;
//   - a delay that adapts: by default the 97th percentile of recent
//     attempt latencies, so that only about 3% of requests get a hedge.
//     Attempts cut short because another one won are recorded at the time
//     they had run, so the estimate does not drift down to the fast answers.
//
// # Use
//
// For HTTP, wrap a transport. Only idempotent requests (GET, HEAD,
// OPTIONS, PUT, DELETE, or marked with Idempotent or an Idempotency-Key
// header) whose bodies can be replayed are hedged; the winner's response
// body stays readable until it is closed:
//
//	client := &http.Client{Transport: hedge.NewTransport(http.DefaultTransport)}
//	resp, err := client.Get("http://backend.internal/item/42")
//	if err != nil {
//		return fmt.Errorf("get item: %w", err)
//	}
//	defer resp.Body.Close()
//
// Options tune the policy, and WithHedgeHosts or WithHedgeTarget send the
// hedge to another replica:
//
//	t := hedge.NewTransport(nil,
//		hedge.WithDelay(5*time.Millisecond),
//		hedge.WithBudget(0.03),
//		hedge.WithHedgeHosts("replica-b:8080"))
//
// Any other call goes through Do, which may share a Policy with
// Transports:
//
//	p := hedge.NewPolicy()
//	row, err := hedge.Do(ctx, p, func(ctx context.Context) (Row, error) {
//		return db.Lookup(ctx, key)
//	})
//
// # Observing
//
// Policy.Stats reports requests, hedges sent and won, hedges denied by
// Reason, the current delay and the extra load. Package hedgeprom exports
// them to Prometheus, so this package depends on the standard library only.
package hedge
