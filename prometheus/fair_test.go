package prometheus_test

import (
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// A Fair's class decisions are counted by class and outcome; no tenant
// appears.
func TestMetricsFairClasses(t *testing.T) {
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	clk := ratelimit.NewManualClock(t0)
	fw, err := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithFairName("api"), ratelimit.WithFairObserver(m),
		ratelimit.WithClasses(ratelimit.Class{Name: "critical", Reserved: 3}, ratelimit.Class{Name: "sheddable"}))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		fair.AllowPriority("secret-tenant", 1)
	}
	fair.AllowPriority("secret-tenant", 0)
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_fair_class_decisions_total{class="sheddable",limiter="api",outcome="allowed"} 7`,
		`ratelimit_fair_class_decisions_total{class="sheddable",limiter="api",outcome="denied"} 3`,
		`ratelimit_fair_class_decisions_total{class="critical",limiter="api",outcome="allowed"} 1`,
		`ratelimit_fair_class_decisions_total{class="critical",limiter="api",outcome="denied"} 0`,
	)
	if strings.Contains(page, "secret-tenant") {
		t.Error("a tenant appears on the metrics page")
	}
	problems, err := testutil.CollectAndLint(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
