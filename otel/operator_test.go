package otel_test

import (
	"context"
	"testing"

	"github.com/ratelimitkit/ratelimit"
	rlotel "github.com/ratelimitkit/ratelimit/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Operator actions are counted by limiter and action, apart from the
// decisions.
func TestMetricsOperatorActions(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := rlotel.New(provider.Meter("github.com/ratelimitkit/ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	clk := ratelimit.NewManualClock(t0)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 6, ratelimit.WithClock(clk),
		ratelimit.WithName("api"), ratelimit.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.SetRate(ratelimit.PerSecond(6), 6); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetOverride("team", ratelimit.PerSecond(50), 50); err != nil {
		t.Fatal(err)
	}
	tb.RemoveOverride("team")
	tb.Reset("k")
	tb.Reset("k")
	r, _ := tb.Take(context.Background(), "k", 2)
	if _, err := r.Settle(1); err != nil {
		t.Fatal(err)
	}
	ints, _ := collect(t, reader)
	for k, v := range map[string]int64{
		"ratelimit.operator.actions ratelimit.limiter=api ratelimit.operator.action=set_rate":        1,
		"ratelimit.operator.actions ratelimit.limiter=api ratelimit.operator.action=set_override":    1,
		"ratelimit.operator.actions ratelimit.limiter=api ratelimit.operator.action=remove_override": 1,
		"ratelimit.operator.actions ratelimit.limiter=api ratelimit.operator.action=reset":           2,
		"ratelimit.operator.actions ratelimit.limiter=api ratelimit.operator.action=settle":          1,
		"ratelimit.decisions ratelimit.limiter=api ratelimit.outcome=allowed":                        1,
	} {
		if got, ok := ints[k]; !ok || got != v {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, v)
		}
	}
}
