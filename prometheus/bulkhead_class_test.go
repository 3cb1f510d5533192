package prometheus_test

import (
	"context"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// A bulkhead's class decisions are counted by class and outcome; no tenant
// appears.
func TestMetricsBulkheadClasses(t *testing.T) {
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	b, err := ratelimit.NewBulkhead(3, ratelimit.WithBulkheadName("db"), ratelimit.WithBulkheadObserver(m),
		ratelimit.WithMaxWaiters(1), ratelimit.WithBulkheadFairQueue(1, 1),
		ratelimit.WithBulkheadClasses(ratelimit.Class{Name: "critical", Reserved: 1}, ratelimit.Class{Name: "batch"}))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		b.TryAcquire() // batch: 2 allowed, 1 rejected (the reserve)
	}
	crit := ratelimit.ContextWithPriority(context.Background(), 0)
	if err := b.AcquireFor(crit, "secret-tenant"); err != nil {
		t.Fatal(err)
	}
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_bulkhead_class_decisions_total{bulkhead="db",class="batch",outcome="allowed"} 2`,
		`ratelimit_bulkhead_class_decisions_total{bulkhead="db",class="batch",outcome="rejected"} 1`,
		`ratelimit_bulkhead_class_decisions_total{bulkhead="db",class="critical",outcome="allowed"} 1`,
		`ratelimit_bulkhead_class_decisions_total{bulkhead="db",class="critical",outcome="rejected"} 0`,
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
