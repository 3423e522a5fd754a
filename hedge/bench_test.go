package hedge

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// stubTransport answers at once with a small body, so a benchmark through
// it measures only the cost of the layers above.
type stubTransport struct{}

func (stubTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

var sinkResp *http.Response

func benchRoundTrip(b *testing.B, rt http.RoundTripper, req *http.Request) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sinkResp = resp
	}
}

// BenchmarkRoundTrip measures what Transport adds to a request when no
// hedge fires: compare "hedge" with "base" in each group.
func BenchmarkRoundTrip(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://stub.invalid/", nil)
	b.Run("stub/base", func(b *testing.B) { benchRoundTrip(b, stubTransport{}, req) })
	b.Run("stub/hedge", func(b *testing.B) { benchRoundTrip(b, NewTransport(stubTransport{}), req) })
	b.Run("stub/hedge-fixed", func(b *testing.B) {
		benchRoundTrip(b, NewTransport(stubTransport{}, WithDelay(50e6)), req)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	creq := req.WithContext(ctx)
	b.Run("stub-cancellable-ctx/base", func(b *testing.B) { benchRoundTrip(b, stubTransport{}, creq) })
	b.Run("stub-cancellable-ctx/hedge", func(b *testing.B) { benchRoundTrip(b, NewTransport(stubTransport{}), creq) })

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	lreq, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	b.Run("loopback/base", func(b *testing.B) { benchRoundTrip(b, base, lreq) })
	b.Run("loopback/hedge", func(b *testing.B) { benchRoundTrip(b, NewTransport(base), lreq) })
	clreq := lreq.WithContext(ctx)
	b.Run("loopback-cancellable-ctx/base", func(b *testing.B) { benchRoundTrip(b, base, clreq) })
	b.Run("loopback-cancellable-ctx/hedge", func(b *testing.B) { benchRoundTrip(b, NewTransport(base), clreq) })
}

var sinkString string

// BenchmarkDo measures Do around an attempt that answers at once.
func BenchmarkDo(b *testing.B) {
	attempt := func(context.Context) (string, error) { return strings.Repeat("x", 1), nil }
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkString, _ = attempt(ctx)
		}
	})
	b.Run("hedge", func(b *testing.B) {
		p := NewPolicy()
		b.ReportAllocs()
		for b.Loop() {
			sinkString, _ = Do(ctx, p, attempt)
		}
	})
}

// TestFastPathAllocs guards the cost of a request that is not hedged: one
// allocation over the base transport (the call, with the primary's request
// and context inside), whether or not the caller's context can be
// cancelled, as long as the base transport does not watch the context.
func TestFastPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tests := []struct {
		name string
		ctx  context.Context
	}{
		{"background context", context.Background()},
		{"cancellable context", ctx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(tt.ctx, http.MethodGet, "http://stub.invalid/", nil)
			allocs := func(rt http.RoundTripper) float64 {
				return testing.AllocsPerRun(500, func() {
					resp, err := rt.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				})
			}
			base, hedged := allocs(stubTransport{}), allocs(NewTransport(stubTransport{}))
			if hedged > base+1 {
				t.Fatalf("%v allocations per request through Transport, %v through the base: want at most one more", hedged, base)
			}
		})
	}
}
