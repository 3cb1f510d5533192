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

// A Fair's decisions are counted by tenant group and outcome; no tenant
// appears; a tenant out of the groups' range counts as ratelimit.OtherGroup.
func TestMetricsFairGroups(t *testing.T) {
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	clk := ratelimit.NewManualClock(t0)
	fw, err := ratelimit.NewFixedWindow(ratelimit.PerSecond(10), ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	group := func(tenant string) int {
		switch tenant {
		case "secret-free":
			return 0
		case "secret-paid":
			return 1
		}
		return 5
	}
	fair, err := ratelimit.NewFair(fw, ratelimit.PerSecond(10), ratelimit.WithFairClock(clk),
		ratelimit.WithFairName("api"), ratelimit.WithFairObserver(m),
		ratelimit.WithTenantGroups([]string{"free", "paid"}, group))
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		fair.Allow("secret-free")
	}
	fair.Allow("secret-paid")
	fair.Allow("secret-unknown")
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_fair_group_decisions_total{group="free",limiter="api",outcome="allowed"} 10`,
		`ratelimit_fair_group_decisions_total{group="free",limiter="api",outcome="denied"} 2`,
		`ratelimit_fair_group_decisions_total{group="paid",limiter="api",outcome="denied"} 1`,
		`ratelimit_fair_group_decisions_total{group="other",limiter="api",outcome="denied"} 1`,
	)
	if strings.Contains(page, "secret-") {
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
