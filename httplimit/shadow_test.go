package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// A shadow limiter behind Middleware lets every request through with no
// rate-limit header, while its observer counts the would-denies.
func TestMiddlewareShadow(t *testing.T) {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	var c ratelimit.Counter
	tb, _ := ratelimit.NewTokenBucket(ratelimit.PerMinute(1), 1, ratelimit.WithClock(clk))
	sh, err := ratelimit.NewShadow(tb, ratelimit.WithName("trial"), ratelimit.WithObserver(&c))
	if err != nil {
		t.Fatal(err)
	}
	h := Middleware(sh)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for i := range 3 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
		for k := range rec.Header() {
			if strings.Contains(strings.ToLower(k), "ratelimit") || k == "Retry-After" {
				t.Errorf("request %d: header %s written for a shadow", i, k)
			}
		}
	}
	if got := c.Get("trial"); got != (ratelimit.Counts{Allowed: 1, WouldDeny: 2}) {
		t.Errorf("counted %+v", got)
	}
}

// Shadow rules are left out of the headers, never deny, and an enforced
// rule beside them still does.
func TestRulesMiddlewareShadowRules(t *testing.T) {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	log := &ratelimit.Counter{}
	rules, err := ratelimit.ParseRules(`
		GET /a: 1/m per ip shadow as trial
		GET /a: 2/m per ip as enforced
		GET /b: 1/m per ip shadow as only-shadow
	`, ratelimit.WithClock(clk), ratelimit.WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	h := RulesMiddleware(rules)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	do := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, req)
		return rec
	}
	for i := range 2 {
		rec := do("/a")
		if rec.Code != http.StatusOK {
			t.Fatalf("/a request %d: %d", i, rec.Code)
		}
		if p := rec.Header().Get("RateLimit-Policy"); p != `"enforced";q=2;w=60` {
			t.Errorf("/a policy %q, want the enforced rule only", p)
		}
		if rl := rec.Header().Get("RateLimit"); !strings.HasPrefix(rl, `"enforced";`) {
			t.Errorf("/a RateLimit %q quotes a shadow rule", rl)
		}
	}
	if rec := do("/a"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("third /a: %d, want the enforced rule's 429", rec.Code)
	}
	for i := range 3 {
		rec := do("/b")
		if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" || rec.Header().Get("RateLimit-Policy") != "" {
			t.Errorf("/b request %d: %d with headers %v", i, rec.Code, rec.Header())
		}
	}
	if got := log.Get("trial"); got != (ratelimit.Counts{Allowed: 1, WouldDeny: 1}) {
		t.Errorf("trial: %+v", got)
	}
	if got := log.Get("only-shadow"); got != (ratelimit.Counts{Allowed: 1, WouldDeny: 2}) {
		t.Errorf("only-shadow: %+v", got)
	}
}
