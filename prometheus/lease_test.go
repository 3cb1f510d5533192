package prometheus_test

import (
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ratelimitkit/ratelimit"
	rlprom "github.com/ratelimitkit/ratelimit/prometheus"
)

// Lease events become the outstanding gauge and the unit counters, under
// the limiter's name, and are not counted as decisions.
func TestLeaseMetrics(t *testing.T) {
	m := rlprom.New()
	reg := prom.NewPedanticRegistry()
	reg.MustRegister(m)
	for _, e := range []ratelimit.Event{
		{Kind: ratelimit.EventLeaseTaken, Limiter: "api:", Key: "k", N: 10},
		{Kind: ratelimit.EventLeaseTaken, Limiter: "api:", Key: "k", N: 4},
		{Kind: ratelimit.EventLeaseSpent, Limiter: "api:", Key: "k", N: 6},
		{Kind: ratelimit.EventLeaseReturned, Limiter: "api:", Key: "k", N: 3},
		{Kind: ratelimit.EventLeaseLapsed, Limiter: "api:", Key: "k", N: 1},
	} {
		m.Observe(e)
	}
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_lease_outstanding_units{limiter="api:"} 4`,
		`ratelimit_lease_taken_units_total{limiter="api:"} 14`,
		`ratelimit_lease_returned_units_total{limiter="api:"} 3`,
		`ratelimit_lease_lapsed_units_total{limiter="api:"} 1`,
		`ratelimit_decisions_total{limiter="api:",outcome="allowed"} 0`,
	)
	if problems, err := testutil.CollectAndLint(m); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	if strings.Contains(page, `"k"`) {
		t.Error("a key reached the page")
	}
}
