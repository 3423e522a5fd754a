package goruntime

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPromPageSize: a /metrics page full of application series costs
// memory only for the go_* series kept, and a page over the cap is refused.
// Reading the page whole allocated at least its size (64 MiB of page cost
// 171 MB of RSS before).
func TestPromPageSize(t *testing.T) {
	line := `app_requests_total{handler="/api/v1/things",code="200",method="GET"} 12345` + "\n"
	pad := strings.Repeat(line, (32<<20)/len(line)) // 32 MiB
	tests := []struct {
		name    string
		page    string
		wantErr string
	}{
		{"big page of other series", "go_goroutines 7\n" + pad + "go_threads 9\n", ""},
		{"over the cap", "go_goroutines 7\n" + pad + pad + pad, "larger than"},
		{"endless go_ series", strings.Repeat("go_goroutines 1\n", 1<<20), "more than 20000 series"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, tc.page)
			}))
			defer srv.Close()
			s := &promSource{client: srv.Client(), url: srv.URL}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			smp, err := s.Read(ctx)
			runtime.ReadMemStats(&after)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if smp.Goroutines != 7 || smp.Threads != 9 {
				t.Errorf("goroutines %d threads %d, want 7 and 9", smp.Goroutines, smp.Threads)
			}
			// The server's own writes allocate in this process too (the
			// page string exists already); 8 MiB is a quarter of the page.
			if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
				t.Errorf("reading a %d MiB page allocated %d MiB", len(tc.page)>>20, got>>20)
			}
		})
	}
}
