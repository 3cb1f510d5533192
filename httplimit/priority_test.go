package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A Fair with classes behind Middleware: requests marked critical by
// WithPriority keep their reserve while the others are refused.
func TestWithPriority(t *testing.T) {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	fw, err := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithClasses(ratelimit.Class{Name: "critical", Reserved: 3}, ratelimit.Class{Name: "rest", Reserved: 0}))
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(fair,
		WithKey(func(r *http.Request) (string, error) { return r.Header.Get("Tenant"), nil }),
		WithPriority(func(r *http.Request) ratelimit.Priority {
			if r.URL.Path == "/pay" {
				return 0
			}
			return 1
		}),
	)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	status := func(path string) int {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	ok := 0
	for range 20 {
		if status("/export") == http.StatusOK {
			ok++
		}
	}
	if ok != 7 {
		t.Errorf("/export: %d of 20 allowed, want the 7 not reserved", ok)
	}
	for i := range 3 {
		if c := status("/pay"); c != http.StatusOK {
			t.Errorf("/pay %d: %d within the critical reserve", i, c)
		}
	}
	if c := status("/pay"); c != http.StatusTooManyRequests {
		t.Errorf("/pay past the limit: %d", c)
	}
}
