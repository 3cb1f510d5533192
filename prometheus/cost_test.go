package prometheus_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimitkit/ratelimit"
	"github.com/ratelimitkit/ratelimit/httplimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// A rules check reports one event per rule whether or not the middleware
// charges a cost: six requests from one address under a per-ip burst of 3
// and a global burst of 100 count six global decisions allowed, and per ip
// three allowed and three denied, with WithCost as without.
func TestRulesCostCountsEveryRule(t *testing.T) {
	for _, cost := range []bool{false, true} {
		clk := ratelimit.NewManualClock(t0)
		m := rlprom.New()
		reg := prom.NewRegistry()
		reg.MustRegister(m)
		rules, err := ratelimit.ParseRules("*: 1/h burst 3 per ip as per-ip\n*: 1/h burst 100 global as global",
			ratelimit.WithObserver(m), ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var opts []httplimit.RulesOption
		if cost {
			opts = append(opts, httplimit.WithCost(func(*http.Request) int { return 1 }))
		}
		h := httplimit.RulesMiddleware(rules, opts...)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var codes []int
		for range 6 {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = "192.0.2.1:1234"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			codes = append(codes, w.Code)
		}
		if want := []int{200, 200, 200, 429, 429, 429}; !equalInts(codes, want) {
			t.Fatalf("cost %v: codes %v, want %v", cost, codes, want)
		}
		has(t, scrape(t, reg),
			`ratelimit_decisions_total{limiter="global",outcome="allowed"} 6`,
			`ratelimit_decisions_total{limiter="global",outcome="denied"} 0`,
			`ratelimit_decisions_total{limiter="per-ip",outcome="allowed"} 3`,
			`ratelimit_decisions_total{limiter="per-ip",outcome="denied"} 3`,
		)
		if t.Failed() {
			t.Fatalf("with cost %v", cost)
		}
		rules.Close()
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
