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

// Operator actions are counted by limiter and action, apart from the
// decisions, and the page still lints.
func TestMetricsOperatorActions(t *testing.T) {
	clk := ratelimit.NewManualClock(t0)
	m := rlprom.New()
	reg := prom.NewRegistry()
	reg.MustRegister(m)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 6, ratelimit.WithClock(clk),
		ratelimit.WithName("api"), ratelimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.SetRate(ratelimit.PerSecond(6), 6); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetOverride("secret-team", ratelimit.PerSecond(50), 50); err != nil {
		t.Fatal(err)
	}
	tb.RemoveOverride("secret-team")
	tb.Reset("secret-key")
	tb.Reset("secret-key")
	r, _ := tb.Take(context.Background(), "secret-key", 2)
	if _, err := r.Settle(1); err != nil {
		t.Fatal(err)
	}
	page := scrape(t, reg)
	has(t, page,
		`ratelimit_operator_actions_total{action="set_rate",limiter="api"} 1`,
		`ratelimit_operator_actions_total{action="set_override",limiter="api"} 1`,
		`ratelimit_operator_actions_total{action="remove_override",limiter="api"} 1`,
		`ratelimit_operator_actions_total{action="reset",limiter="api"} 2`,
		`ratelimit_operator_actions_total{action="settle",limiter="api"} 1`,
		`ratelimit_decisions_total{limiter="api",outcome="allowed"} 1`,
	)
	if strings.Contains(page, "secret") {
		t.Error("a key appears on the page")
	}
	if problems, err := testutil.CollectAndLint(m); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
